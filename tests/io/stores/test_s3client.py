"""io.stores.client against a real S3-compatible server (moto on 127.0.0.1): exact ranged
reads on both backends, a concurrency bound that holds on the wire, endpoint and
credentials from arguments, AWS variables and a profile, multipart uploads that are
aborted when they fail, and errors that are retried or final as they should be."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

from botocore.exceptions import ClientError  # noqa: E402

from turbofeed.io.retry import RemoteError, RetryPolicy  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import CredentialsError, S3Config  # noqa: E402
from turbofeed.io.stores.errors import ShortRead, changed, not_found, retryable  # noqa: E402
from turbofeed.testing import FaultProxy, LocalS3Server  # noqa: E402

BUCKET = "tf-client"
FAST = RetryPolicy(max_attempts=6, base_delay=0.005, max_delay=0.05)
BACKENDS = ["obstore", "boto3"]
MiB = 1 << 20


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        S3Client(_config(srv.endpoint)).boto3_client().create_bucket(Bucket=BUCKET)
        yield srv


@pytest.fixture(autouse=True)
def no_aws_setup(monkeypatch, tmp_path):
    """Nothing from this machine's AWS setup, and never the instance metadata service."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _config(endpoint: str, **kw) -> S3Config:
    kw.setdefault("retry", FAST)
    return S3Config(endpoint_url=endpoint, access_key_id="test", secret_access_key="test", **kw)


@pytest.fixture(scope="module")
def blob(server) -> tuple[str, bytes]:
    data = np.random.default_rng(0).bytes(3 * MiB + 12345)
    url = f"s3://{BUCKET}/blobs/blob.bin"
    S3Client(_config(server.endpoint)).put(url, data)
    return url, data


@pytest.mark.parametrize("backend", BACKENDS)
def test_ranged_reads_listing_and_downloads_are_exact(server, blob, backend, tmp_path):
    url, data = blob
    client = S3Client(_config(server.endpoint, client=backend, part_size=MiB))
    assert client.backend == backend
    info = client.head(url)
    assert info.size == len(data) and info.etag
    assert [o.url for o in client.list(f"s3://{BUCKET}/blobs/")] == [url]
    assert client.list(f"s3://{BUCKET}/blobs/blo")[0] == info
    for start, end in [(0, 1), (1000, 1777), (len(data) - 10, len(data)), (5, 5)]:
        assert bytes(client.get_range(url, start, end)) == data[start:end]
    assert bytes(client.get_range(url, 7, 99, expect=info)) == data[7:99]
    out = bytearray(len(data) - 100)
    client.read_into(url, 100, memoryview(out))
    assert out == data[100:]
    path = tmp_path / "copy.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        client.download_to(url, len(data), fd, expect=info)
    finally:
        os.close(fd)
    assert path.read_bytes() == data
    assert client.stats.retries == 0 and client.stats.bytes_read > 2 * len(data)


def test_requests_in_flight_never_exceed_max_concurrency(server, blob):
    """Part downloads and sample reads from 4 threads share one bound of 3 requests,
    seen at the proxy; the latency makes requests overlap, so the bound is reached."""
    url, data = blob
    with FaultProxy(server.endpoint, latency=0.03) as proxy:
        client = S3Client(_config(proxy.endpoint, max_concurrency=3, part_size=256 << 10))
        out = bytearray(len(data))

        def samples() -> None:
            for k in range(6):
                assert bytes(client.get_range(url, k * 1000, k * 1000 + 500)) == data[k * 1000:k * 1000 + 500]
        readers = [threading.Thread(target=samples) for _ in range(4)]
        for t in readers:
            t.start()
        client.read_into(url, 0, memoryview(out))
        for t in readers:
            t.join()
    assert out == data
    assert proxy.max_in_flight == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_endpoint_and_credentials_from_arguments_variables_and_profile(server, blob, backend,
                                                                        monkeypatch, tmp_path):
    """The access key that signs the requests (seen at the proxy) comes from, in order:
    S3Config arguments, then AWS_* variables, then the profile; ``profile=`` wins over
    the variables and ``AWS_PROFILE`` does not (boto3's rules)."""
    url, _ = blob
    (tmp_path / "config").write_text("[profile tf]\nregion = eu-west-1\nendpoint_url = {endpoint}\n")
    (tmp_path / "credentials").write_text(
        "[tf]\naws_access_key_id = from-profile\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    with FaultProxy(server.endpoint) as proxy:
        config_text = (tmp_path / "config").read_text().replace("{endpoint}", proxy.endpoint)
        (tmp_path / "config").write_text(config_text)

        def signer(config: S3Config) -> set[str]:
            proxy.access_keys.clear()
            client = S3Client(config)
            client.head(url)
            return set(proxy.access_keys)

        assert signer(S3Config(endpoint_url=proxy.endpoint, access_key_id="from-args",
                               secret_access_key="s", client=backend)) == {"from-args"}
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
        assert signer(S3Config(client=backend)) == {"from-env"}
        monkeypatch.setenv("AWS_PROFILE", "tf")
        assert signer(S3Config(client=backend)) == {"from-env"}
        monkeypatch.delenv("AWS_ENDPOINT_URL")  # the profile's endpoint_url is used
        assert signer(S3Config(profile="tf", client=backend)) == {"from-profile"}
        assert S3Client(S3Config(profile="tf", client=backend)).auth.region == "eu-west-1"


def test_missing_credentials_and_profile_are_final_and_clear(server):
    with pytest.raises(CredentialsError, match="no AWS credentials found"):
        S3Client(S3Config(endpoint_url=server.endpoint)).head(f"s3://{BUCKET}/x")
    with pytest.raises(CredentialsError, match="no AWS credentials found"):
        S3Client(S3Config(endpoint_url=server.endpoint, client="boto3")).head(f"s3://{BUCKET}/x")
    with pytest.raises(CredentialsError, match="profile 'nope' not found"):
        S3Client(S3Config(profile="nope"))
    with pytest.raises(CredentialsError, match="without a secret"):
        S3Client(S3Config(access_key_id="only-the-id"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_object_is_final_with_a_short_message(server, backend):
    client = S3Client(_config(server.endpoint, client=backend))
    url = f"s3://{BUCKET}/blobs/absent.bin"
    for request in (lambda: client.head(url), lambda: client.get_range(url, 0, 10)):
        with pytest.raises(RemoteError) as info:
            request()
        assert not_found(info.value)
        assert str(info.value).startswith(("HEAD " + url, url)) and len(str(info.value)) < 400
    assert client.stats.retries == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replaced_object_fails_its_if_match_reads(server, backend):
    url = f"s3://{BUCKET}/blobs/replaced.bin"
    client = S3Client(_config(server.endpoint, client=backend))
    client.put(url, b"first version" * 100)
    old = client.head(url)
    client.put(url, b"second version" * 100)
    with pytest.raises(RemoteError) as info:
        client.get_range(url, 0, 10, expect=old)
    assert changed(info.value) and client.stats.retries == 0
    assert bytes(client.get_range(url, 0, 6, expect=client.head(url))) == b"second"


def test_unreachable_endpoint_fails_in_three_quick_tries_until_it_has_answered(server, blob):
    """A wrong endpoint fails fast; an endpoint that answered once gets the whole policy
    (it may be restarting)."""
    url, _ = blob
    with socket.socket() as closed:  # bound, not listening: refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        for backend in BACKENDS:
            client = S3Client(_config(endpoint, client=backend,
                                      retry=RetryPolicy(max_attempts=8, base_delay=0.2, max_delay=5)))
            started = time.monotonic()
            with pytest.raises(RemoteError, match=f"cannot connect to {endpoint} \\(3 attempts"):
                client.head(url)
            assert time.monotonic() - started < 2.5
    proxy = FaultProxy(server.endpoint)
    client = S3Client(_config(proxy.endpoint))
    client.head(url)
    proxy.close()  # the port now refuses connections
    with pytest.raises(RemoteError, match="gave up after 6 attempts"):
        client.head(url)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slowdowns_drops_and_cut_bodies_are_retried_and_counted(server, blob, backend):
    url, data = blob
    with FaultProxy(server.endpoint, slowdown=0.2, drop=0.15, truncate=0.15, seed=3) as proxy:
        client = S3Client(_config(proxy.endpoint, client=backend,
                                  retry=RetryPolicy(max_attempts=20, base_delay=0.001, max_delay=0.01)))
        for k in range(30):
            assert bytes(client.get_range(url, k * 5000, k * 5000 + 4000)) == data[k * 5000:k * 5000 + 4000]
    stats = client.stats.as_dict()
    assert stats["retries"] == proxy.counts["slowdown"] + proxy.counts["drop"] + proxy.counts["truncate"]
    assert stats["retries"] > 0 and sum(stats["retry_reasons"].values()) == stats["retries"]
    assert stats["requests"] == 30 + stats["retries"]


def test_a_local_write_failure_is_final(server, blob, tmp_path):
    url, data = blob
    client = S3Client(_config(server.endpoint, part_size=MiB))
    (tmp_path / "ro").write_bytes(b"")
    fd = os.open(tmp_path / "ro", os.O_RDONLY)  # pwrite fails with EBADF
    try:
        with pytest.raises(RemoteError, match="LocalWriteError: cannot store"):
            client.download_to(url, len(data), fd)
    finally:
        os.close(fd)
    assert client.stats.retries == 0


def _uploads(client: S3Client, key: str) -> list:
    found = client.boto3_client().list_multipart_uploads(Bucket=BUCKET, Prefix=key)
    return found.get("Uploads", [])


def test_multipart_upload_round_trips(server):
    client = S3Client(_config(server.endpoint, part_size=5 * MiB))
    data = np.random.default_rng(1).bytes(11 * MiB)
    url = f"s3://{BUCKET}/up/whole.bin"
    etag = client.put(url, data)
    assert etag.endswith("-3")  # three parts
    assert bytes(client.get_range(url, 0, len(data))) == data
    assert _uploads(client, "up/whole.bin") == []


def test_a_failed_multipart_upload_is_aborted_and_leaves_no_object(server):
    """The source fails on part 2: the upload is aborted, no object appears."""
    client = S3Client(_config(server.endpoint, part_size=5 * MiB))
    data = np.random.default_rng(2).bytes(11 * MiB)
    view = memoryview(data)
    url, key = f"s3://{BUCKET}/up/failed.bin", "up/failed.bin"

    def read_part(pos: int, n: int) -> memoryview:
        if pos >= 5 * MiB:
            raise OSError("disk went away")
        return view[pos:pos + n]
    with pytest.raises(OSError, match="disk went away"):
        client.upload(url, len(data), read_part)
    assert _uploads(client, key) == []
    with pytest.raises(RemoteError) as info:
        client.head(url)
    assert not_found(info.value)


def test_an_upload_the_server_keeps_refusing_is_aborted_and_the_old_object_stays(server):
    """Every part PUT answered 503: after the retries the upload is aborted (DELETE
    passes), and the object keeps its previous content."""
    url, key = f"s3://{BUCKET}/up/kept.bin", "up/kept.bin"
    direct = S3Client(_config(server.endpoint))
    direct.put(url, b"old content")
    with FaultProxy(server.endpoint, slowdown=1.0, methods=("PUT",)) as proxy:
        client = S3Client(_config(proxy.endpoint, part_size=5 * MiB))
        with pytest.raises(RemoteError, match="UploadPart .* gave up after 6 attempts"):
            client.put(url, np.random.default_rng(3).bytes(11 * MiB))
    assert proxy.counts["slowdown"] >= 6
    assert _uploads(direct, key) == []
    assert bytes(direct.get_range(url, 0, 11)) == b"old content"


def test_the_local_server_stops_and_frees_its_port():
    srv = LocalS3Server()
    port = srv.port
    srv.restart(0.0)
    srv.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


class GenericError(Exception):
    """Stands for obstore's GenericError, which carries the HTTP status in its text."""


@pytest.mark.parametrize("exc,retry", [
    (ConnectionResetError("reset"), True),
    (TimeoutError("slow"), True),
    (ShortRead("got 5 of 10 bytes"), True),
    (_client_error(503, "SlowDown"), True),
    (_client_error(500, "InternalError"), True),
    (_client_error(400, "RequestTimeout"), True),
    (_client_error(429, "TooManyRequests"), True),
    (_client_error(404, "NoSuchKey"), False),
    (_client_error(403, "AccessDenied"), False),
    (_client_error(412, "PreconditionFailed"), False),
    (GenericError("Error performing GET http://h/b/k in 4ms - Server returned non-2xx status "
                  "code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>"), True),
    (GenericError("Error performing GET http://h/b/k in 4ms - Server returned non-2xx status "
                  "code: 403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code></Error>"), False),
    (GenericError("error sending request: connection closed before message completed"), True),
    (FileNotFoundError("Object at location x not found"), False),
    (CredentialsError("no AWS credentials found"), False),
    (ValueError("bad argument"), False),
])
def test_which_errors_are_retried(exc, retry):
    assert retryable(exc) is retry
