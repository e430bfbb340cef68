"""Master-key rotation: every sealed value moves to the new key, content and API keys do not
change, an interrupted rotation can be run again, a wrong key stops a start, the key's age."""

from __future__ import annotations

import base64
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from actors.webhooks.secrets import secret_context, webhook_box
from gateway.config.master_key import MASTER_KEY_FILE, NEXT_KEY_FILE, read_key_file
from gateway.errors import RotationError, WrongMasterKey
from gateway.keyring import register_age_gauge, unlock
from gateway.keyring.command import rotate_command
from gateway.keyring.rotate import _reseal_table, rotate_master_key
from gateway.operations.metrics import Metrics
from gateway.runtime import open_runtime
from protocol import blobcrypt
from protocol.credentials import CredentialHasher, CredentialKind, derive_pepper
from protocol.errors import SecretBoxError
from protocol.ids import new_id
from protocol.keyring import key_id
from protocol.provider_keys import sealing_context
from protocol.secretbox import FILE_KEYS, PROVIDER_KEYS, SecretBox, unwrap_data_key, wrap_data_key
from protocol.timefmt import now_us
from storage.images import ImageRecord
from storage.keyring import SEALED_COLUMNS
from storage.open import Storage, open_storage
from storage.webhooks.records import NewWebhook
from tests.gateway.keys_client import create_key
from tests.harness import gateway_config, running_gateway

_REPO = Path(__file__).resolve().parents[2]
OLD = b"o" * 32
NEW = b"n" * 32
THIRD = b"t" * 32


@dataclass
class Seeded:
    """Sealed rows of one org, with the plaintexts they hold."""

    org_id: str
    provider_key: str = "sk-provider-key-of-the-org"
    webhook_id: str = ""
    current_secret: str = "whsec_current-secret-value"
    previous_secret: str = "whsec_previous-secret-value"
    files: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)  # id -> (blob, content)
    images: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)  # generated images


async def _seed(storage: Storage, key: bytes, files: int = 3, images: int = 1) -> Seeded:
    org = await storage.orgs.create(f"org-{os.urandom(4).hex()}")
    seeded = Seeded(org.id)
    box = SecretBox.for_purpose(key, PROVIDER_KEYS)
    sealed = box.seal(seeded.provider_key, sealing_context(org.id, "openai"))
    await storage.provider_keys.put(org.id, "openai", sealed, "-org")
    wbox = webhook_box(key)
    seeded.webhook_id = new_id("whk")
    context = secret_context(org.id, seeded.webhook_id)
    now = now_us()
    new = NewWebhook(
        id=seeded.webhook_id,
        org_id=org.id,
        url="https://hooks.example.com/in",
        events=("*",),
        description=None,
        enabled=True,
        secret_sealed=wbox.seal(seeded.previous_secret, context),
        secret_hint="whsec_…alue",
    )
    await storage.webhooks.create(new, now)
    await storage.webhooks.rotate_secret(
        org.id,
        seeded.webhook_id,
        now,
        secret_sealed=wbox.seal(seeded.current_secret, context),
        secret_hint="whsec_…alue",
        previous_secret_sealed=wbox.seal(seeded.previous_secret, context),
        previous_expires_at=now + 86_400_000_000,
    )
    fbox = SecretBox.for_purpose(key, FILE_KEYS)
    for i in range(files):
        file_id = new_id("file")
        data_key = blobcrypt.new_data_key()
        content = f"the content of file {i}".encode()
        blob = blobcrypt.encrypt(data_key, file_id, content)
        await storage.db.execute(
            "INSERT INTO files (id, org_id, purpose, filename, bytes, media_type, status,"
            " blob_key, data_key_sealed, charged_bytes, created_at, updated_at)"
            " VALUES (:id, :org, 'assistants', 'a.txt', :bytes, 'text/plain', 'processed',"
            " :blob_key, :sealed, :bytes, :now, :now)",
            {
                "id": file_id,
                "org": org.id,
                "bytes": len(content),
                "blob_key": f"blobs/{file_id}",
                "sealed": wrap_data_key(fbox, data_key, (org.id, file_id)),
                "now": now,
            },
        )
        seeded.files[file_id] = (blob, content)
    for i in range(images):  # services/images.py: data keys sealed like files'
        image_id = new_id("img")
        data_key = blobcrypt.new_data_key()
        content = f"png {i}".encode()
        await storage.images.insert(
            ImageRecord(
                id=image_id,
                org_id=org.id,
                token_hash=os.urandom(32).hex(),
                blob_key=f"images/{org.id}/{image_id}",
                data_key_sealed=wrap_data_key(fbox, data_key, (org.id, image_id)),
                bytes=len(content),
                media_type="image/png",
                created_at=now,
                expires_at=now + 3_600_000_000,
            )
        )
        seeded.images[image_id] = (blobcrypt.encrypt(data_key, image_id, content), content)
    return seeded


async def _sealed_values(storage: Storage, seeded: Seeded) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for spec in SEALED_COLUMNS:
        for row in await storage.keyring.sealed_rows(spec, "", 1000):
            if row["org_id"] == seeded.org_id:
                for column in spec.columns:
                    out[f"{spec.table}.{column}.{row['id']}"] = row[column]
    return out


async def _assert_under(storage: Storage, seeded: Seeded, key: bytes, not_key: bytes) -> None:
    """Every sealed value of `seeded` opens under `key`, to what was sealed, and not `not_key`."""
    for k, other in ((key, True), (not_key, False)):
        rows = await storage.provider_keys.list(seeded.org_id)
        sealed = await storage.db.fetchval(
            "SELECT sealed_key FROM provider_keys WHERE id = :id", {"id": rows[0].id}
        )
        box = SecretBox.for_purpose(k, PROVIDER_KEYS)
        webhook = await storage.webhooks.get(seeded.org_id, seeded.webhook_id)
        assert webhook is not None and webhook.previous_secret_sealed is not None
        context = secret_context(seeded.org_id, seeded.webhook_id)
        wbox = webhook_box(k)
        fbox = SecretBox.for_purpose(k, FILE_KEYS)
        file_rows = await storage.db.fetch(
            "SELECT id, data_key_sealed FROM files WHERE org_id = :org", {"org": seeded.org_id}
        )
        assert {r["id"] for r in file_rows} == set(seeded.files)
        image_rows = await storage.db.fetch(
            "SELECT id, data_key_sealed FROM images WHERE org_id = :org", {"org": seeded.org_id}
        )
        assert {r["id"] for r in image_rows} == set(seeded.images)
        if other:
            assert box.open(sealed, sealing_context(seeded.org_id, "openai")) == (
                seeded.provider_key
            )
            assert wbox.open(webhook.secret_sealed, context) == seeded.current_secret
            assert wbox.open(webhook.previous_secret_sealed, context) == seeded.previous_secret
            for r in file_rows:
                data_key = unwrap_data_key(fbox, r["data_key_sealed"], (seeded.org_id, r["id"]))
                blob, content = seeded.files[r["id"]]
                assert blobcrypt.decrypt(data_key, r["id"], blob) == content  # blob untouched
            for r in image_rows:
                data_key = unwrap_data_key(fbox, r["data_key_sealed"], (seeded.org_id, r["id"]))
                blob, content = seeded.images[r["id"]]
                assert blobcrypt.decrypt(data_key, r["id"], blob) == content
        else:
            with pytest.raises(SecretBoxError):
                box.open(sealed, sealing_context(seeded.org_id, "openai"))
            for value in (webhook.secret_sealed, webhook.previous_secret_sealed):
                with pytest.raises(SecretBoxError):
                    wbox.open(value, context)
            for r in [*file_rows, *image_rows]:
                with pytest.raises(SecretBoxError):
                    unwrap_data_key(fbox, r["data_key_sealed"], (seeded.org_id, r["id"]))


async def test_rotation_reseals_every_secret_and_keeps_the_pepper(storage: Storage) -> None:
    seeded = await _seed(storage, OLD)
    before = await unlock(storage.keyring, OLD)  # the first start: the derived pepper
    assert before.pepper == derive_pepper(OLD)
    report = await rotate_master_key(storage.keyring, OLD, NEW, batch=2, clock=lambda: 7)
    assert report.resealed == {
        "provider_keys": 1,
        "webhooks": 2,
        "files": 3,
        "images": 1,
        "responses": 0,
        "mirror_results": 0,
    }
    assert not report.unreadable and not report.finished_earlier
    await _assert_under(storage, seeded, NEW, OLD)
    after = await unlock(storage.keyring, NEW)
    assert after.pepper == derive_pepper(OLD)  # every API key hash stays valid
    stored = " ".join(map(str, (await storage.db.fetch("SELECT * FROM keyring"))[0].values()))
    for form in (after.pepper.hex(), base64.b64encode(after.pepper).decode()):
        assert form not in stored  # sealed, never in clear
    assert (after.master_key_id, after.master_key_created_at) == (key_id(NEW), 7)
    with pytest.raises(WrongMasterKey, match="not the one this database's secrets are sealed"):
        await unlock(storage.keyring, OLD)
    with pytest.raises(RotationError, match="is the current one"):
        await rotate_master_key(storage.keyring, NEW, NEW)


async def test_interrupted_rotation_finishes_when_run_again(storage: Storage) -> None:
    seeded = await _seed(storage, OLD)
    await unlock(storage.keyring, OLD)
    # A run that died after marking the keyring and re-sealing the files table only.
    assert await storage.keyring.begin_rotation(key_id(OLD), key_id(NEW))
    files = next(s for s in SEALED_COLUMNS if s.table == "files")
    assert await _reseal_table(storage.keyring, files, OLD, NEW, 1) == (3, [])
    # Meanwhile the old key still starts instances; the new one is refused, saying why.
    assert (await unlock(storage.keyring, OLD)).pepper == derive_pepper(OLD)
    with pytest.raises(WrongMasterKey, match="unfinished rotation"):
        await unlock(storage.keyring, NEW)
    # Another new key is refused: the files are under NEW and must stay reachable.
    untouched = await _sealed_values(storage, seeded)
    with pytest.raises(RotationError, match=f"another master key \\(id {key_id(NEW)}\\)"):
        await rotate_master_key(storage.keyring, OLD, THIRD)
    assert await _sealed_values(storage, seeded) == untouched
    report = await rotate_master_key(storage.keyring, OLD, NEW)
    assert report.resealed == {
        "provider_keys": 1,
        "webhooks": 2,
        "files": 0,
        "images": 1,
        "responses": 0,
        "mirror_results": 0,
    }
    await _assert_under(storage, seeded, NEW, OLD)
    assert (await unlock(storage.keyring, NEW)).pepper == derive_pepper(OLD)
    # And once more, finished: nothing left to do, nothing changes.
    done = await _sealed_values(storage, seeded)
    again = await rotate_master_key(storage.keyring, OLD, NEW)
    assert again.finished_earlier and sum(again.resealed.values()) == 0
    assert await _sealed_values(storage, seeded) == done


async def test_run_again_reseals_what_old_instances_wrote_after_the_rotation(
    storage: Storage,
) -> None:
    await rotate_master_key(storage.keyring, OLD, NEW)  # an empty database: only the keyring
    late = await _seed(storage, OLD, files=1)  # an instance not yet restarted, still on OLD
    unreadable = await _seed(storage, THIRD, files=0, images=0)  # under neither key
    report = await rotate_master_key(storage.keyring, OLD, NEW)
    assert report.finished_earlier
    assert report.resealed == {
        "provider_keys": 1,
        "webhooks": 2,
        "files": 1,
        "images": 1,
        "responses": 0,
        "mirror_results": 0,
    }
    await _assert_under(storage, late, NEW, OLD)
    pk = (await storage.provider_keys.list(unreadable.org_id))[0].id
    assert report.unreadable == {"provider_keys": [pk], "webhooks": [unreadable.webhook_id]}
    await _assert_under(storage, unreadable, THIRD, NEW)  # left as it was


async def test_a_wrong_master_key_stops_the_start(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path / "a")
    async with open_runtime(config):
        pass
    other = gateway_config(database_url, tmp_path / "b")
    with pytest.raises(BaseExceptionGroup) as info:
        async with open_runtime(other):
            pass
    assert info.group_contains(WrongMasterKey, match="not the one this database's", depth=None)


def _names(directory: Path) -> set[str]:
    return set(os.listdir(directory))


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


async def test_command_with_a_key_file_replaces_it_and_api_keys_still_work(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY="")  # master.key
    key_file = tmp_path / MASTER_KEY_FILE
    async with running_gateway(config) as gw:
        old = read_key_file(key_file)
        secret = await create_key(gw, name="ops", scopes=["keys:manage"])
        seeded = await _seed(gw.runtime.storage, old)
        credentials = [gw.management_key, secret["key"]]
    capsys.readouterr()
    assert await rotate_command(config, {}) == 0
    out = capsys.readouterr()
    new = read_key_file(key_file)
    assert new != old and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert _names(tmp_path) >= {MASTER_KEY_FILE} and not _names(tmp_path) & {NEXT_KEY_FILE}
    assert not [n for n in _names(tmp_path) if n.endswith(".tmp")]
    assert _b64(new) not in out.out + out.err and _b64(old) not in out.out + out.err
    assert "Restart every instance now" in out.out
    async with running_gateway(config) as gw:
        for credential in credentials:
            r = await gw.client.get("/v1/keys", headers=gw.auth(credential))
            assert r.status_code == 200, r.text
        await _assert_under(gw.runtime.storage, seeded, new, old)


async def test_command_finishes_a_rotation_interrupted_before_the_file_was_replaced(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY="")
    key_file, next_file = tmp_path / MASTER_KEY_FILE, tmp_path / NEXT_KEY_FILE
    async with open_runtime(config) as runtime:
        old = read_key_file(key_file)
        seeded = await _seed(runtime.storage, old)
    # The run wrote master.key.new, put the database under it, and died before the rename.
    next_file.write_text(_b64(NEW) + "\n")
    async with open_storage(config.database_url) as storage:
        await rotate_master_key(storage.keyring, old, NEW)
    with pytest.raises(BaseExceptionGroup) as info:  # the old file no longer starts anything
        async with open_runtime(config):
            pass
    assert info.group_contains(WrongMasterKey, match="run it again", depth=None)
    # A different GATEWAY_NEW_MASTER_KEY is refused; without it, the run finishes.
    with pytest.raises(RotationError, match="interrupted rotation"):
        await rotate_command(config, {"GATEWAY_NEW_MASTER_KEY": _b64(THIRD)})
    assert await rotate_command(config, {}) == 0
    assert "already" in capsys.readouterr().out
    assert read_key_file(key_file) == NEW and not next_file.exists()
    async with open_runtime(config) as runtime:
        await _assert_under(runtime.storage, seeded, NEW, old)


async def test_command_with_a_configured_key_prints_the_generated_one_once(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A management key hashed before the keyring existed, with the pepper derived from OLD.
    async with open_storage(database_url) as storage:
        org = await storage.orgs.create("legacy")
        legacy = CredentialHasher(derive_pepper(OLD)).generate(CredentialKind.MANAGEMENT)
        await storage.orgs.add_management_key(org.id, legacy)
    config = gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY=_b64(OLD))
    async with running_gateway(config) as gw:
        r = await gw.client.get("/v1/keys", headers=gw.auth(legacy.value))
        assert r.status_code == 200, r.text
    capsys.readouterr()
    assert await rotate_command(config, {}) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    printed = lines[lines.index(next(ln for ln in lines if "shown once" in ln)) + 1]
    new = base64.b64decode(printed)
    assert len(new) == 32 and out.out.count(printed) == 1 and printed not in out.err
    assert "Set GATEWAY_MASTER_KEY" in out.out
    assert not (tmp_path / MASTER_KEY_FILE).exists()  # nothing written for a configured key
    assert not (tmp_path / NEXT_KEY_FILE).exists()
    rotated = gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY=printed)
    async with running_gateway(rotated) as gw:
        r = await gw.client.get("/v1/keys", headers=gw.auth(legacy.value))
        assert r.status_code == 200, r.text
    # Generating another key while that is not finished is refused, before printing anything.
    async with open_storage(database_url) as storage:
        assert await storage.keyring.begin_rotation(key_id(new), key_id(THIRD))
    with pytest.raises(Exception) as info:  # a group of one when raised inside PostgreSQL's
        await rotate_command(rotated, {})
    leaf = _leaf(info.value)
    assert isinstance(leaf, RotationError) and "GATEWAY_NEW_MASTER_KEY" in str(leaf)
    assert "shown once" not in capsys.readouterr().out


async def test_command_with_a_given_new_key_prints_no_key(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY=_b64(OLD))
    async with open_runtime(config) as runtime:
        seeded = await _seed(runtime.storage, OLD)
    capsys.readouterr()
    assert await rotate_command(config, {"GATEWAY_NEW_MASTER_KEY": _b64(NEW)}) == 0
    out = capsys.readouterr()
    assert _b64(NEW) not in out.out + out.err and _b64(OLD) not in out.out + out.err
    assert "the value of GATEWAY_NEW_MASTER_KEY" in out.out
    async with open_runtime(
        gateway_config(database_url, tmp_path, GATEWAY_MASTER_KEY=_b64(NEW))
    ) as r:
        await _assert_under(r.storage, seeded, NEW, OLD)


async def test_master_key_age_in_metrics(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path)
    assert config.master_key is not None
    days_100 = 100 * 86_400
    async with open_storage(config.database_url) as storage:
        await unlock(storage.keyring, config.master_key)
        await storage.db.execute(
            "UPDATE keyring SET master_key_created_at = :t", {"t": now_us() - days_100 * 10**6}
        )
    async with running_gateway(config) as gw:
        text = (await gw.client.get("/metrics")).text
    assert "# TYPE gateway_master_key_age_seconds gauge" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("gateway_master_key_age_"))
    assert days_100 <= float(line.split()[-1]) < days_100 + 60


async def test_master_key_age_counts_from_the_rotation(storage: Storage) -> None:
    day_us = 86_400 * 10**6
    await rotate_master_key(storage.keyring, OLD, NEW, clock=lambda: 10 * day_us)
    keyring = await unlock(storage.keyring, NEW)
    metrics = Metrics()
    register_age_gauge(metrics, keyring, clock=lambda: 101 * day_us)
    assert f"gateway_master_key_age_seconds {91 * 86_400.0}" in metrics.render()


async def _gateway_process(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    environ.update(GATEWAY_DATA_DIR=str(tmp_path / "var"), GATEWAY_PORT="0", **env)
    environ["PYTHONPATH"] = str(_REPO)  # this checkout's code, whatever the venv installed
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "gateway", *args],
            env=environ,
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_command_line_exit_codes_and_messages(database_url: str, tmp_path: Path) -> None:
    db = {"GATEWAY_DATABASE_URL": database_url}
    code, out, err = await _gateway_process(
        tmp_path, "admin", "create-org", "acme", GATEWAY_MASTER_KEY=_b64(OLD), **db
    )
    assert code == 0, err
    code, out, err = await _gateway_process(tmp_path, "serve", GATEWAY_MASTER_KEY=_b64(THIRD), **db)
    assert code == 1 and "Traceback" not in err
    assert f"the master key (id {key_id(THIRD)}) is not the one" in err
    code, out, err = await _gateway_process(
        tmp_path,
        "admin",
        "rotate-master-key",
        GATEWAY_MASTER_KEY=_b64(OLD),
        GATEWAY_NEW_MASTER_KEY="not-a-key",
        **db,
    )
    assert code == 2 and "GATEWAY_NEW_MASTER_KEY" in err and "Traceback" not in err
    code, out, err = await _gateway_process(
        tmp_path,
        "admin",
        "rotate-master-key",
        GATEWAY_MASTER_KEY=_b64(OLD),
        GATEWAY_NEW_MASTER_KEY=_b64(NEW),
        **db,
    )
    assert code == 0, err
    assert f"now under the new master key (id {key_id(NEW)})" in out
    code, out, err = await _gateway_process(  # the old key again: refused, nothing generated
        tmp_path, "admin", "rotate-master-key", GATEWAY_MASTER_KEY=_b64(OLD), **db
    )
    assert code == 1 and f"id {key_id(OLD)}) is not this database's" in err
    assert "shown once" not in out
