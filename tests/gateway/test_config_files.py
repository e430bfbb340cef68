"""`[files]`: the blob store choice, its S3 settings, credentials from the standard
AWS variables only, and never a credential in repr or errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, FilesConfig, load_config

# A `[files]` table for S3 as an operator writes it, comments and all.
S3_EXAMPLE = """\
[files]
store = "s3"
s3_endpoint_url = "http://127.0.0.1:8333"   # omit for AWS itself
s3_bucket = "gateway-files"               # created at start if missing
s3_region = "us-east-1"
"""
KEY_ID = "AKIAEXAMPLEKEYID0001"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def load(tmp_path: Path, text: str, **environ: str) -> FilesConfig:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, environ=environ).files


def test_default_is_the_local_store(tmp_path: Path) -> None:
    assert load(tmp_path, "") == FilesConfig(store="local")
    assert load(tmp_path, '[files]\nstore = "local"\n') == FilesConfig()


def test_s3_example_with_credentials_from_the_environment(tmp_path: Path) -> None:
    files = load(tmp_path, S3_EXAMPLE, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET)
    assert files == FilesConfig(
        store="s3",
        s3_endpoint_url="http://127.0.0.1:8333",
        s3_bucket="gateway-files",
        s3_region="us-east-1",
        s3_access_key_id=KEY_ID,
        s3_secret_access_key=SECRET,
    )


def test_s3_without_endpoint_or_credentials_means_aws_and_its_own_chain(tmp_path: Path) -> None:
    files = load(tmp_path, '[files]\nstore = "s3"\ns3_bucket = "b-1.example"\n')
    assert files == FilesConfig(store="s3", s3_bucket="b-1.example")


def test_repr_never_shows_credentials(tmp_path: Path) -> None:
    config_text = S3_EXAMPLE.replace("127.0.0.1", "user:pw-in-url@127.0.0.1")
    path = tmp_path / "gateway.toml"
    path.write_text(config_text, encoding="utf-8")
    config = load_config(
        path, environ={"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    )
    for text in (repr(config.files), repr(config), str(config.files)):
        assert KEY_ID not in text and SECRET not in text and "pw-in-url" not in text
        assert "gateway-files" in text


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('store = "disk"', "files.store", "must be one of local, s3"),
        ("store = 1", "files.store", "must be one of local, s3"),
        ('store = "s3"', "files.s3_bucket", 'is required with store = "s3"'),
        ('store = "s3"\ns3_bucket = "AB"', "files.s3_bucket", "must be an S3 bucket name"),
        ('store = "s3"\ns3_bucket = "Upper-Case"', "files.s3_bucket", "bucket name"),
        ('store = "s3"\ns3_bucket = "a..b"', "files.s3_bucket", "bucket name"),
        ('store = "s3"\ns3_bucket = "192.168.1.1"', "files.s3_bucket", "bucket name"),
        ('store = "s3"\ns3_bucket = "-abc"', "files.s3_bucket", "bucket name"),
        ('store = "s3"\ns3_bucket = "' + "a" * 64 + '"', "files.s3_bucket", "bucket name"),
        ('store = "s3"\ns3_bucket = "bkt"\ns3_region = "US East"', "files.s3_region", "region"),
        (
            'store = "s3"\ns3_bucket = "bkt"\ns3_endpoint_url = "ftp://x"',
            "files.s3_endpoint_url",
            "must be an http:// or https:// URL",
        ),
        ('s3_bucket = "bkt"', "files.s3_bucket", 'applies only with store = "s3"'),
        ('s3_region = "us-east-1"', "files.s3_region", 'applies only with store = "s3"'),
        ('store = "s3"\ns3_bucket = "bkt"\ns3_secret = "x"', "files.s3_secret", "unknown key"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"[files]\n{text}\n")
    assert caught.value.key == key
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("environ", "missing"),
    [
        ({"AWS_ACCESS_KEY_ID": KEY_ID}, "AWS_SECRET_ACCESS_KEY"),
        ({"AWS_SECRET_ACCESS_KEY": SECRET}, "AWS_ACCESS_KEY_ID"),
    ],
)
def test_half_a_credential_pair_is_an_error_that_shows_neither(
    tmp_path: Path, environ: dict[str, str], missing: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, S3_EXAMPLE, **environ)
    assert caught.value.file == "environment"
    assert caught.value.key == missing
    assert KEY_ID not in str(caught.value) and SECRET not in str(caught.value)


def test_credentials_are_ignored_for_the_local_store(tmp_path: Path) -> None:
    files = load(tmp_path, "", AWS_ACCESS_KEY_ID=KEY_ID)
    assert files.s3_access_key_id is None and files.s3_secret_access_key is None
