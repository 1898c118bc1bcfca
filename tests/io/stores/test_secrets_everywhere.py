"""No credential is ever printed or written (issue 40).

A distinct secret is planted in every credential field of every store config, in the
``AWS_*``/``AZURE_*`` variables, and in every way a URL can carry one (a query string,
a user and password in a shard URL or an endpoint). Then the public entry points run
with DEBUG logging: construction, an epoch against the local S3 server, the web server
and Azurite (skipped when it is not installed), ``turbofeed doctor``, ``inspect``,
``index``, failing connections and refused URLs. Everything they produce is scanned for
any planted secret: log records (their tracebacks included), stdout and stderr,
exception texts (the whole chain, as a traceback prints it), reprs, ``state_dict()``,
``stats``, ``profile()``, and every file written under the cache directory and beside
the data (the bucket's objects).

The bearer token of the web server and the Azurite account key are real credentials
the servers check, so the epochs also show that they reach the servers.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import traceback
from collections.abc import Iterator

import pytest
from builders import FAST_RETRY, free_port, upload_shards
from conftest import SHARDS, serve

import turbofeed
from turbofeed.cli import main as cli
from turbofeed.errors import DatasetError
from turbofeed.io import AzureConfig, GCSConfig, HTTPConfig, S3Config
from turbofeed.io.stores.config import configure
from turbofeed.io.stores.urls import close_clients

pytest.importorskip("obstore")  # the one reader of these stores

# One distinct secret per place a credential can be given; each is recognisable in any
# text by the word PLANTED (the Azure keys are base64, as Azure's keys are).
SECRETS = {
    "s3 secret_access_key": "PLANTEDs3secretKEYwJalrXUtnFEMI",
    "s3 session_token": "PLANTEDs3sessionTOKENFwoGZXIvYXdz",
    "AWS_SECRET_ACCESS_KEY": "PLANTEDenvSECRETkeyK7MDENGbPxRfiCY",
    "AWS_SESSION_TOKEN": "PLANTEDenvSESSIONtokenIQoJb3JpZ2lu",
    "azure account_key": base64.b64encode(b"PLANTED azure account key, 32+ bytes long").decode(),
    "azure sas_token": "sv=2021-08-06&ss=b&srt=sco&sig=PLANTEDazureSAS",
    "azure connection AccountKey": base64.b64encode(b"PLANTED connection string account key").decode(),
    "azure connection SharedAccessSignature": "sv=2021&sig=PLANTEDconnSAS",
    "AZURE_STORAGE_ACCOUNT_KEY": base64.b64encode(b"PLANTED env account key, long enough").decode(),
    "AZURE_STORAGE_SAS_TOKEN": "sv=2022&sig=PLANTEDenvSAS",
    "http Authorization": "PLANTEDbearerTOKENhf",
    "http X-Api-Key": "PLANTEDapiKEYheader",
    "url query": "PLANTEDquerySIGNATURE",
    "url userinfo": "PLANTEDuserinfoPASSWORD",
    "endpoint userinfo": "PLANTEDendpointPASSWORD",
    "AWS_ENDPOINT_URL userinfo": "PLANTEDenvENDPOINTpassword",
}
KEY_ID = "AKIAVISIBLEKEYID"  # an identifier: shown


class Scan:
    """Everything the entry points produced, by where it came from."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, value: object) -> None:
        self.texts.append((where, value if isinstance(value, str) else repr(value)))

    def error(self, where: str, exc: BaseException) -> None:
        self.add(f"{where}: str", str(exc))
        self.add(f"{where}: traceback", "".join(traceback.format_exception(exc)))

    def files(self, where: str, root: str) -> int:
        count = 0
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    self.add(f"{where}: {path}", f.read().decode("latin-1") + "\n" + path)
                count += 1
        return count

    def leaks(self, secrets: dict[str, str] | None = None) -> list[str]:
        secrets = SECRETS if secrets is None else secrets
        return [f"{name} in {where}: ...{text[max(0, text.find(s) - 80):text.find(s) + 40]!r}..."
                for where, text in self.texts for name, s in secrets.items() if s in text]


@pytest.fixture
def scan(caplog, capsys, tmp_path, monkeypatch) -> Iterator[Scan]:
    """DEBUG logging everywhere, a private cache, the planted ``AWS_*``/``AZURE_*``
    variables; after the test, the logs and the captured output join the scan."""
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.setenv(name, SECRETS[name])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "plantedaccount")
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "STORAGE_EMULATOR_HOST",
                 "AZURE_STORAGE_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.DEBUG)
    out = Scan()
    yield out
    configure(S3Config())
    close_clients()
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    records = caplog.get_records("setup") + caplog.get_records("call")
    for record in records:
        out.add(f"log {record.name}", formatter.format(record))
    captured = capsys.readouterr()
    out.add("stdout", captured.out)
    out.add("stderr", captured.err)
    out.files("cache", str(tmp_path / "cache"))
    assert not out.leaks(), "\n".join(out.leaks())


def epoch(scan: Scan, where: str, dataset: turbofeed.Dataset) -> int:
    """One epoch of a loader over ``dataset``; its repr, state, stats and profile scanned."""
    loader = turbofeed.DataLoader(dataset, batch_size=4, shuffle=True, return_keys=True,
                                  transform=turbofeed.transforms.imagenet_eval(16))
    samples = sum(len(batch[-1]) for batch in loader)
    scan.add(f"{where} dataset repr", repr(dataset))
    scan.add(f"{where} loader repr", repr(loader))
    scan.add(f"{where} state_dict", json.dumps(loader.state_dict()))
    scan.add(f"{where} stats", repr(loader.stats))
    scan.add(f"{where} stats dict", json.dumps(loader.stats.as_dict(), default=repr))
    scan.add(f"{where} profile", loader.profile())
    loader.close()
    return samples


def planted_configs(endpoint: str) -> dict[str, object]:
    """Every config with its credential fields planted."""
    azure = AzureConfig(account_name="plantedaccount", account_key=SECRETS["azure account_key"],
                        sas_token=SECRETS["azure sas_token"], endpoint_url=f"{endpoint}/plantedaccount")
    connection = AzureConfig(connection_string=(
        f"DefaultEndpointsProtocol=http;AccountName=plantedaccount;"
        f"AccountKey={SECRETS['azure connection AccountKey']};BlobEndpoint={endpoint}/plantedaccount;"
        f"SharedAccessSignature={SECRETS['azure connection SharedAccessSignature']}"))
    http = HTTPConfig(headers={"Authorization": f"Bearer {SECRETS['http Authorization']}",
                               "X-Api-Key": SECRETS["http X-Api-Key"], "User-Agent": "planted-test/1.0"})
    s3 = S3Config(endpoint_url=endpoint, access_key_id=KEY_ID, secret_access_key=SECRETS["s3 secret_access_key"],
                  session_token=SECRETS["s3 session_token"], retry=FAST_RETRY,
                  gcs=GCSConfig(endpoint_url=endpoint), azure=azure, http=http)
    return {"s3": s3, "azure": azure, "azure connection": connection, "http": http}


# ----- construction ---------------------------------------------------------------------
def test_construction_shows_no_secret(scan):
    from rich.pretty import pretty_repr

    for name, config in planted_configs("http://127.0.0.1:9").items():
        scan.add(f"{name} repr", repr(config))
        scan.add(f"{name} str", str(config))
        scan.add(f"{name} rich", pretty_repr(config))
    s3 = planted_configs("http://127.0.0.1:9")["s3"]
    ds = turbofeed.Dataset("s3://bucket/train/shard-{0000..0003}.tar", storage=s3)
    scan.add("Dataset repr", repr(ds))
    for data in (f"https://127.0.0.1:1/d/shard-0.tar?sig={SECRETS['url query']}",
                 [f"https://u:{SECRETS['url userinfo']}@127.0.0.1:1/d/shard-0.tar", "local/shard-1.tar"]):
        described = turbofeed.Dataset(data)  # a description: nothing is opened, nothing refused yet
        scan.add("Dataset repr of a URL with credentials", repr(described))
        assert "https://" in repr(described) and "****" in repr(described)
    assert KEY_ID in repr(s3) and "plantedaccount" in repr(s3) and "planted-test/1.0" in repr(s3)


def test_a_pickled_config_carries_its_credentials_to_rebuild_its_clients():
    s3 = planted_configs("http://127.0.0.1:9")["s3"]
    again = pickle.loads(pickle.dumps(s3))
    assert again == s3 and again.secret_access_key == SECRETS["s3 secret_access_key"]
    assert dict(again.http.headers)["Authorization"] == f"Bearer {SECRETS['http Authorization']}"


# ----- refused URLs and failing connections ---------------------------------------------
def test_refused_urls_and_failing_connections_show_no_secret(scan, tmp_path, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    configs = planted_configs(dead)
    cases = {
        "query": lambda: turbofeed.DataLoader(turbofeed.Dataset(
            f"{dead}/d/shard-0.tar?sig={SECRETS['url query']}&se=2030", storage=configs["s3"]), batch_size=2),
        "userinfo": lambda: turbofeed.DataLoader(turbofeed.Dataset(
            f"http://user:{SECRETS['url userinfo']}@127.0.0.1:1/d/shard-{{0..1}}.tar"), batch_size=2),
        "endpoint userinfo": lambda: S3Config(
            endpoint_url=f"http://minio:{SECRETS['endpoint userinfo']}@127.0.0.1:9000"),
        "s3 dead": lambda: turbofeed.DataLoader(turbofeed.Dataset("s3://bucket/train/", storage=configs["s3"]),
                                                batch_size=2),
        "gcs dead": lambda: turbofeed.DataLoader(turbofeed.Dataset("gs://bucket/train/", storage=configs["s3"]),
                                                 batch_size=2),
        "azure dead": lambda: turbofeed.DataLoader(turbofeed.Dataset("az://box/train/", storage=configs["s3"]),
                                                   batch_size=2),
        "azure connection dead": lambda: turbofeed.DataLoader(turbofeed.Dataset(
            "az://box/train/", storage=S3Config(azure=configs["azure connection"], retry=FAST_RETRY)), batch_size=2),
        "azure env dead": lambda: turbofeed.DataLoader(turbofeed.Dataset(
            "az://box/train/", storage=S3Config(azure=AzureConfig(endpoint_url=f"{dead}/plantedaccount"),
                                           retry=FAST_RETRY)), batch_size=2),
        "http dead": lambda: turbofeed.DataLoader(turbofeed.Dataset(
            f"{dead}/d/shard-{{0..1}}.tar", storage=configs["s3"]), batch_size=2),
    }
    for name, run in cases.items():
        with pytest.raises((DatasetError, ValueError)) as err:
            run()
        scan.error(name, err.value)
        assert "****" in str(err.value) or "cannot connect" in str(err.value), (name, str(err.value))
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://minio:{SECRETS['AWS_ENDPOINT_URL userinfo']}@127.0.0.1:1")
    with pytest.raises(DatasetError) as err:
        turbofeed.DataLoader(turbofeed.Dataset("s3://bucket/train/"), batch_size=2)
    scan.error("AWS_ENDPOINT_URL userinfo", err.value)
    assert "AWS_ENDPOINT_URL" in str(err.value)


# ----- epochs ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_server():
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as srv:
        yield srv


def test_an_s3_epoch_doctor_inspect_and_index_show_and_write_no_secret(scan, s3_server, tmp_path, monkeypatch,
                                                                       caplog):
    from turbofeed.testing import FaultProxy

    prefix = "s3://planted/train/"
    upload_shards(s3_server.endpoint, prefix, shards=4, per_shard=6)
    with FaultProxy(s3_server.endpoint, slowdown=0.5) as proxy:  # 503s: retries, logged at DEBUG
        s3 = planted_configs(proxy.endpoint)["s3"]
        ds = turbofeed.Dataset(prefix, storage=s3, cache_dir=str(tmp_path / "cache"))
        assert epoch(scan, "s3", ds) == 24
        assert proxy.counts["slowdown"] > 0 and proxy.access_keys == {KEY_ID}
    assert any(r.name == "turbofeed" and "retry" in r.getMessage() for r in caplog.records)  # DEBUG is on
    # the command line reads the AWS_* variables (planted secret key and session token)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    close_clients()
    for argv in (["doctor"], ["doctor", "--json"], ["inspect", prefix], ["inspect", "--json", prefix],
                 ["index", prefix]):
        assert cli(argv) == 0, argv
    client = s3_server_client(s3_server.endpoint)
    names = [o["Key"] for o in client.list_objects_v2(Bucket="planted")["Contents"]]
    assert "train/turbofeed.index" in names  # written beside the data
    for name in names:
        body = client.get_object(Bucket="planted", Key=name)["Body"].read()
        scan.add(f"s3://planted/{name}", body.decode("latin-1"))


def s3_server_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1")


def test_a_web_server_epoch_inspect_and_index_show_and_write_no_secret(scan, local_shards, tmp_path):
    from servers import RangeHTTPServer

    srv = RangeHTTPServer(token=SECRETS["http Authorization"])  # answers 401 without the planted token
    try:
        for name in local_shards["names"]:
            with open(os.path.join(local_shards["folder"], name), "rb") as f:
                srv.files[f"/data/{name}"] = f.read()
        spec = f"{srv.endpoint}/data/shard-{{0000..{SHARDS - 1:04d}}}.tar"
        s3 = planted_configs(srv.endpoint)["s3"]
        ds = turbofeed.Dataset(spec, storage=s3, cache_dir=str(tmp_path / "cache"))
        assert epoch(scan, "http", ds) > 0
        configure(s3)  # the command line's default config
        for argv in (["inspect", spec], ["index", spec]):
            assert cli(argv) == 0, argv
        wrong = S3Config(http=HTTPConfig(headers={"Authorization": f"Bearer {SECRETS['http X-Api-Key']}"}),
                         retry=FAST_RETRY)
        with pytest.raises(DatasetError, match="401") as err:  # a token the server refuses
            turbofeed.DataLoader(turbofeed.Dataset(spec, storage=wrong), batch_size=2)
        scan.error("http 401", err.value)
    finally:
        srv.stop()


def test_an_azurite_epoch_shows_and_writes_no_account_key(scan, local_shards, tmp_path, monkeypatch):
    from servers import AZ_KEY

    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name)  # obstore reads them too: only the connection string's account here
    served = serve("azure", local_shards, str(tmp_path))  # skips when Azurite is not installed
    try:
        ds = turbofeed.Dataset(served.spec, storage=served.config(), cache_dir=str(tmp_path / "cache"))
        assert epoch(scan, "azure", ds) > 0
        configure(served.config())
        assert cli(["index", served.spec]) == 0
        scan.add("azure repr", repr(served.config()))
    finally:
        served.server.stop()
    assert not scan.leaks({"Azurite account key": AZ_KEY}), scan.leaks({"Azurite account key": AZ_KEY})
