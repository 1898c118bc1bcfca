"""turbofeed.redact: how secrets, URLs, connection strings and headers are shown."""

from __future__ import annotations

import pytest

from turbofeed.redact import (mask, redact_connection_string, redact_headers, redact_text, redact_url,
                              url_credentials)


def test_mask_hides_tokens_whole_and_keys_but_their_last_four():
    assert mask("FwoGZXIvYXdzEJr//////////wEaDPLANTED") == "****"
    assert mask("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", keep=4) == "****EKEY"
    assert mask("short", keep=4) == "****"  # too short: its last 4 would be most of it
    assert mask(None) is None and mask("") == ""


@pytest.mark.parametrize("url, shown", [
    ("https://host/d/shard-0.tar?sig=abc&se=2030", "https://host/d/shard-0.tar?****"),
    ("https://user:pass@host:8443/d/x.tar", "https://****@host:8443/d/x.tar"),
    ("http://token@host/d/x.tar?x=1#frag", "http://****@host/d/x.tar?****#****"),
    ("s3://bucket/train/shard-{0000..0009}.tar", "s3://bucket/train/shard-{0000..0009}.tar"),
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ("https://host/d/x.tar?", "https://host/d/x.tar?"),
])
def test_redact_url_keeps_scheme_host_and_path_and_says_what_was_hidden(url, shown):
    assert redact_url(url) == shown


def test_url_credentials_names_what_may_carry_one():
    assert url_credentials("https://u:p@h/x?sig=1") == ["userinfo", "query"]
    assert url_credentials("https://h/x?sig=1") == ["query"]
    assert url_credentials("https://h/x.tar") == []


def test_redact_text_redacts_every_url_in_a_library_error():
    text = ("Error performing GET http://u:PLANTED1@127.0.0.1:41/b?list-type=2&sig=PLANTED2 in 1ms\n"
            "    uri: Some(\n        https://h/x?sig=PLANTED3,\n    ),")
    out = redact_text(text)
    assert "PLANTED" not in out
    assert "http://****@127.0.0.1:41/b?****" in out and "https://h/x?****" in out
    assert redact_text("no url here: s3://b/k") == "no url here: s3://b/k"


def test_connection_string_shows_account_and_endpoint_not_key_or_signature():
    text = ("DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=c2VjcmV0LWtleS1QTEFOVEVEWFla;"
            "BlobEndpoint=http://127.0.0.1:10000/acct;SharedAccessSignature=sv=2021&sig=PLANTED")
    assert redact_connection_string(text) == (
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=****WFla;"
        "BlobEndpoint=http://127.0.0.1:10000/acct;SharedAccessSignature=****")
    assert redact_connection_string("UseDevelopmentStorage=true") == "UseDevelopmentStorage=true"
    assert redact_connection_string("Unknown=PLANTED;garbage-PLANTED") == "Unknown=****;****"


def test_only_known_harmless_header_values_are_shown():
    shown = redact_headers([("Authorization", "Bearer PLANTED"), ("User-Agent", "me/1.0"),
                            ("X-Api-Key", "PLANTED"), ("accept", "*/*")])
    assert shown == (("Authorization", "****"), ("User-Agent", "me/1.0"), ("X-Api-Key", "****"),
                     ("accept", "*/*"))


def test_botocore_debug_lines_lose_the_secrets_handed_to_boto3_and_any_session_token(caplog):
    import logging

    from turbofeed.redact import hide_in_library_logs

    hide_in_library_logs("PLANTEDsecretKEY123", None, "test")
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore.endpoint").debug(
        "Sending http request: %s", {"X-Amz-Security-Token": b"PLANTEDprofileTOKEN", "key": "PLANTEDsecretKEY123"})
    logging.getLogger("botocore.auth").debug("CanonicalRequest:\nx-amz-security-token:PLANTEDprofileTOKEN\nhost")
    logging.getLogger("botocore.auth").debug("a test line")  # values under 8 characters are left alone
    text = caplog.text
    assert "PLANTED" not in text
    assert "'X-Amz-Security-Token': b'****'" in text and "x-amz-security-token:****" in text
    assert "a test line" in text


def test_a_storage_error_names_its_urls_without_query_or_userinfo():
    from turbofeed.io.retry import RemoteError, RetryPolicy

    def fail():
        raise OSError("Error performing GET http://u:PLANTED1@h:1/b/x?sig=PLANTED2 in 1ms: 403")
    with pytest.raises(RemoteError) as err:
        RetryPolicy(max_attempts=1).call(fail, what="GET s3://b/x", retryable=lambda exc: False)
    assert "PLANTED" not in str(err.value) and "http://****@h:1/b/x?****" in str(err.value)
