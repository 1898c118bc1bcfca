"""gds.config: defaults < YAML file < TURBOFEED_GDS_* < arguments, sizes like "16M", and
errors that name the key and where its value came from."""

from __future__ import annotations

import pytest

from turbofeed.gds import GDSConfig, GDSConfigError, load_config, parse_size

pytest.importorskip("yaml")


def _yaml(tmp_path, text: str, name: str = "gds.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_when_nothing_is_set():
    loaded = load_config(env={})
    assert loaded.config == GDSConfig()
    assert set(loaded.sources.values()) == {"default"} and loaded.path is None
    assert loaded.config.staging_buffers == 8  # 256 MiB / 16 MiB, capped by queue_depth 8


def test_yaml_then_env_then_arguments(tmp_path):
    path = _yaml(tmp_path, "gds:\n  buffer_pool_size: 512M\n  max_transfer_size: 8MiB\n"
                           "  queue_depth: 4\n  device_ids: [0, 1]\n  enable_p2p: yes\n")
    env = {"TURBOFEED_GDS_QUEUE_DEPTH": "12", "TURBOFEED_GDS_MAX_TRANSFER_SIZE": "32M",
           "TURBOFEED_GDS_ENABLE_ASYNC": "off"}
    loaded = load_config(path, env=env, overrides={"enable_async": True})
    c = loaded.config
    assert c.buffer_pool_size == 512 << 20 and c.device_ids == (0, 1) and c.enable_p2p is True
    assert c.queue_depth == 12 and c.max_transfer_size == 32 << 20   # env beats the file
    assert c.enable_async is True                                     # argument beats env
    assert c.enabled is True                                          # untouched default
    assert loaded.sources == {
        "enabled": "default", "buffer_pool_size": f"file {path}", "max_transfer_size":
        "env TURBOFEED_GDS_MAX_TRANSFER_SIZE", "queue_depth": "env TURBOFEED_GDS_QUEUE_DEPTH",
        "enable_async": "argument", "device_ids": f"file {path}", "enable_p2p": f"file {path}"}
    assert loaded.path == path


def test_file_named_by_the_environment(tmp_path):
    path = _yaml(tmp_path, "enabled: false\nqueue_depth: 2\n")  # top-level keys work too
    loaded = load_config(env={"TURBOFEED_GDS_CONFIG": path, "TURBOFEED_GDS_DEVICE_IDS": "1, 3"})
    assert loaded.config.enabled is False and loaded.config.queue_depth == 2
    assert loaded.config.device_ids == (1, 3) and loaded.path == path
    assert loaded.sources["device_ids"] == "env TURBOFEED_GDS_DEVICE_IDS"


def test_an_argument_path_wins_over_the_environment_file(tmp_path):
    a = _yaml(tmp_path, "queue_depth: 2\n", "a.yaml")
    b = _yaml(tmp_path, "queue_depth: 3\n", "b.yaml")
    assert load_config(b, env={"TURBOFEED_GDS_CONFIG": a}).config.queue_depth == 3


@pytest.mark.parametrize("text, expected", [
    ("16777216", 16 << 20), ("16M", 16 << 20), ("16MiB", 16 << 20), ("16mb", 16 << 20),
    ("1.5G", 3 << 29), ("4k", 4096), ("512B", 512), (" 2 G ", 2 << 30), (4096, 4096),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("env, key, words", [
    ({"TURBOFEED_GDS_MAX_TRANSFER_SIZE": "lots"}, "max_transfer_size", ["'lots'", "16M"]),
    ({"TURBOFEED_GDS_MAX_TRANSFER_SIZE": "0"}, "max_transfer_size", ["> 0"]),
    ({"TURBOFEED_GDS_BUFFER_POOL_SIZE": "1.5"}, "buffer_pool_size", ["'1.5'"]),
    ({"TURBOFEED_GDS_QUEUE_DEPTH": "0"}, "queue_depth", [">= 1"]),
    ({"TURBOFEED_GDS_QUEUE_DEPTH": "four"}, "queue_depth", ["'four'"]),
    ({"TURBOFEED_GDS_ENABLED": "maybe"}, "enabled", ["true or false"]),
    ({"TURBOFEED_GDS_DEVICE_IDS": "0,x"}, "device_ids", ["'x'"]),
    ({"TURBOFEED_GDS_DEVICE_IDS": "1,1"}, "device_ids", ["twice"]),
    ({"TURBOFEED_GDS_DEVICE_IDS": "-1"}, "device_ids", [">= 0"]),
    ({"TURBOFEED_GDS_QUEUE_DEPHT": "4"}, "queue_depht", ["did you mean 'queue_depth'"]),
])
def test_bad_environment_values_name_key_and_variable(env, key, words):
    with pytest.raises(GDSConfigError) as info:
        load_config(env=env)
    text = str(info.value)
    assert info.value.key == key and f"gds config: {key}:" in text
    assert f"env {next(iter(env))}" in text
    for word in words:
        assert word in text


def test_bad_file_values_name_the_file(tmp_path):
    path = _yaml(tmp_path, "gds:\n  queue_depth: -2\n")
    with pytest.raises(GDSConfigError, match=rf"queue_depth: .*-2.*\(file {path}\)"):
        load_config(path, env={})
    path = _yaml(tmp_path, "gds:\n  max_transfer_sise: 8M\n", "typo.yaml")
    with pytest.raises(GDSConfigError, match="max_transfer_sise: unknown setting; did you mean 'max_transfer_size'"):
        load_config(path, env={})


def test_pool_must_hold_one_transfer():
    with pytest.raises(GDSConfigError, match=r"buffer_pool_size: 1048576 bytes cannot hold one transfer .*"
                                             r"\(env TURBOFEED_GDS_MAX_TRANSFER_SIZE\).*\(env TURBOFEED_GDS_BUFFER"):
        load_config(env={"TURBOFEED_GDS_BUFFER_POOL_SIZE": "1M", "TURBOFEED_GDS_MAX_TRANSFER_SIZE": "2M"})
    with pytest.raises(GDSConfigError, match="buffer_pool_size"):
        GDSConfig(buffer_pool_size=1 << 20, max_transfer_size=2 << 20)


def test_unreadable_or_malformed_files(tmp_path):
    with pytest.raises(GDSConfigError, match="cannot read .*missing.yaml"):
        load_config(str(tmp_path / "missing.yaml"), env={})
    with pytest.raises(GDSConfigError, match="not valid YAML"):
        load_config(_yaml(tmp_path, "gds: [unclosed\n", "bad.yaml"), env={})
    with pytest.raises(GDSConfigError, match="must hold a mapping"):
        load_config(_yaml(tmp_path, "- 1\n- 2\n", "list.yaml"), env={})
    assert load_config(_yaml(tmp_path, "", "empty.yaml"), env={}).config == GDSConfig()


def test_dataclass_validates_and_normalises():
    c = GDSConfig(buffer_pool_size="64M", max_transfer_size="4M", device_ids=[2, 0], enabled="no")
    assert c.buffer_pool_size == 64 << 20 and c.device_ids == (2, 0) and c.enabled is False
    assert c.staging_buffers == 8 and GDSConfig(buffer_pool_size="8M", max_transfer_size="4M").staging_buffers == 2
    with pytest.raises(GDSConfigError, match="queue_depth"):
        GDSConfig(queue_depth=0)
