"""Object stores (``s3://``, ``gs://``, ``az://``, ``http(s)://``): the client
(:mod:`.client`, :mod:`.transfers`), its configuration and counters (:mod:`.config`), the
other stores' configs and obstore stores (:mod:`.families`) and errors (:mod:`.errors`),
dataset specs to shard URLs (:mod:`.urls`), the node's shard cache (:mod:`.cache`), remote
tar shards as sources (:mod:`.shards`, :mod:`.compressed`) and the streaming fetch stage
(:mod:`.stream`). Every store goes through the one client, so through the same cache,
streaming, dataset index and resume. ``turbofeed.io.s3`` is this package's old name."""
