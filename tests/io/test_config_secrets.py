"""Store configs never print their credentials: ``repr``/``str``/``__rich_repr__`` show
secrets as ``'****'`` (keys: ``'****'`` + their last 4), identifiers in clear; equality,
hashing and pickling use the real values. URLs that carry credentials (userinfo, a
query string) are refused, and the refusal does not repeat them."""

from __future__ import annotations

import copy
import pickle

import pytest

from turbofeed.errors import DatasetError
from turbofeed.io import AzureConfig, GCSConfig, HTTPConfig, S3Config, resolve

KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTKEY"
TOKEN = "FwoGZXIvYXdzEJr//PLANTEDTOKEN"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLANTEDAZUREKEYK1SZFPTOtr=="
SAS = "sv=2021-08-06&ss=b&sig=PLANTEDSAS%3D"
CONN_KEY = "Y29ubmVjdGlvbi1zdHJpbmcta2V5LVBMQU5URURDT05O"
BEARER = "Bearer hf_PLANTEDBEARER"
API_KEY = "PLANTEDAPIKEY"


def configs() -> dict[str, object]:
    azure = AzureConfig(connection_string=f"AccountName=acct;AccountKey={CONN_KEY};BlobEndpoint=http://127.0.0.1:1/acct",
                        account_name="acct", account_key=AZ_KEY, sas_token=SAS,
                        endpoint_url="http://127.0.0.1:10000/acct")
    http = HTTPConfig(headers={"Authorization": BEARER, "X-Api-Key": API_KEY, "User-Agent": "trainer/1.0"})
    gcs = GCSConfig(endpoint_url="http://127.0.0.1:9023", service_account_path="/etc/sa.json")
    s3 = S3Config(endpoint_url="http://127.0.0.1:9000", access_key_id="AKIAVISIBLEID", secret_access_key=KEY,
                  session_token=TOKEN, gcs=gcs, azure=azure, http=http)
    return {"s3": s3, "azure": azure, "http": http, "gcs": gcs}


SECRETS = [KEY, TOKEN, AZ_KEY, SAS, CONN_KEY, BEARER, "PLANTEDBEARER", API_KEY, "PLANTED"]


def shown(obj: object) -> list[str]:
    out = [repr(obj), str(obj), f"{obj}", f"{obj!r}"]
    try:
        from rich.pretty import pretty_repr
    except ImportError:
        return out
    return out + [pretty_repr(obj)]


@pytest.mark.parametrize("name", ["s3", "azure", "http", "gcs"])
def test_reprs_hide_every_secret(name):
    for text in shown(configs()[name]):
        for secret in SECRETS:
            assert secret not in text, f"{name}: {secret!r} in {text}"


def test_reprs_show_identifiers_and_what_is_set():
    s3 = configs()["s3"]
    text = repr(s3)
    assert "access_key_id='AKIAVISIBLEID'" in text
    assert "endpoint_url='http://127.0.0.1:9000'" in text
    assert f"secret_access_key='****{KEY[-4:]}'" in text and "session_token='****'" in text
    assert "account_name='acct'" in text and f"account_key='****{AZ_KEY[-4:]}'" in text
    assert "sas_token='****'" in text
    assert f"AccountName=acct;AccountKey=****{CONN_KEY[-4:]};BlobEndpoint=http://127.0.0.1:1/acct" in text
    assert "('User-Agent', 'trainer/1.0')" in text and "('Authorization', '****')" in text
    assert "('X-Api-Key', '****')" in text
    assert "service_account_path='/etc/sa.json'" in text
    assert "secret_access_key=None" in repr(S3Config())  # unset stays visibly unset


def test_rich_repr_gives_the_redacted_fields():
    s3 = configs()["s3"]
    fields = dict(s3.__rich_repr__())
    assert fields["secret_access_key"] == f"****{KEY[-4:]}" and fields["access_key_id"] == "AKIAVISIBLEID"
    assert dict(s3.http.__rich_repr__())["headers"][0] == ("Authorization", "****")


@pytest.mark.parametrize("name", ["s3", "azure", "http", "gcs"])
def test_equality_hashing_and_pickling_use_the_real_values(name):
    config = configs()[name]
    again = pickle.loads(pickle.dumps(config))
    assert again == config and hash(again) == hash(config) and copy.deepcopy(config) == config
    s3 = configs()["s3"]
    assert s3.secret_access_key == KEY and s3.session_token == TOKEN and s3.azure.account_key == AZ_KEY
    assert dict(s3.http.headers)["Authorization"] == BEARER
    other = S3Config(access_key_id="AKIAVISIBLEID", secret_access_key=KEY[:-1] + "X")
    assert other != S3Config(access_key_id="AKIAVISIBLEID", secret_access_key=KEY)
    assert repr(other) != repr(S3Config(access_key_id="AKIAVISIBLEID", secret_access_key=KEY))


def test_the_gds_configs_and_client_show_no_secret():
    from turbofeed.gds.client import GPUDirectClient
    from turbofeed.gds.config import GDSConfig, load_config

    client = GPUDirectClient("http://127.0.0.1:9", "AKIAVISIBLEID", KEY, config=GDSConfig(enabled=False))
    try:
        for text in [repr(GDSConfig()), repr(load_config(env={})), repr(client), repr(client.s3_config)]:
            assert KEY not in text
        assert "AKIAVISIBLEID" in repr(client.s3_config)
    finally:
        client.close()


@pytest.mark.parametrize("url, carried", [
    ("http://127.0.0.1:1/d/shard-0.tar?sig=PLANTEDQUERY", "query string"),
    ("http://user:PLANTEDPASS@127.0.0.1:1/d/shard-0.tar", "user and password"),
    ("https://PLANTEDTOKEN@127.0.0.1:1/d/shard-{0..3}.tar", "user and password"),
])
def test_a_url_carrying_credentials_is_refused_without_repeating_them(url, carried):
    with pytest.raises(DatasetError) as err:
        resolve(url)
    text = str(err.value)
    assert "PLANTED" not in text and "****" in text and carried in text
    assert "HTTPConfig(headers=" in text
    cause: BaseException | None = err.value
    while cause is not None:
        assert "PLANTED" not in str(cause)
        cause = cause.__cause__


@pytest.mark.parametrize("make", [
    lambda: S3Config(endpoint_url="http://minio:PLANTEDPASS@127.0.0.1:9000"),
    lambda: GCSConfig(endpoint_url="http://127.0.0.1:9023?token=PLANTEDTOKEN"),
    lambda: AzureConfig(endpoint_url="http://u:PLANTEDPASS@127.0.0.1:10000/acct"),
])
def test_an_endpoint_carrying_credentials_is_refused_without_repeating_them(make):
    with pytest.raises(ValueError) as err:
        make()
    assert "PLANTED" not in str(err.value) and "****" in str(err.value)


def test_an_endpoint_variable_carrying_credentials_is_refused(monkeypatch):
    from turbofeed.io.stores.urls import close_clients

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:PLANTEDPASS@127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAVISIBLEID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEY)
    try:
        with pytest.raises(DatasetError) as err:
            resolve("s3://bucket/prefix/", storage=S3Config())
    finally:
        close_clients()
    assert "PLANTED" not in str(err.value) and KEY not in str(err.value)
    assert "AWS_ENDPOINT_URL" in str(err.value)
