"""Public test helpers, for turbofeed's tests and for users' own: a local S3-compatible
server and a fault-injecting proxy (:mod:`.s3`), so code that reads ``s3://`` data can be
tested offline, with dropped connections, ``503 SlowDown`` and cut bodies on demand.

    from turbofeed.testing import FaultProxy, LocalS3Server

    with LocalS3Server() as server, FaultProxy(server.endpoint, slowdown=0.1) as proxy:
        config = turbofeed.S3Config(endpoint_url=proxy.endpoint, access_key_id="test",
                                    secret_access_key="test")

``LocalS3Server`` needs moto (``pip install 'turbofeed[test]'``). ``CpuStandInDecoder``
(:mod:`.gpu`) stands in for the GPU decoder on a machine without one.
"""

from .gpu import CpuStandInDecoder
from .s3 import FaultProxy, LocalS3Server

__all__ = ["CpuStandInDecoder", "FaultProxy", "LocalS3Server"]
