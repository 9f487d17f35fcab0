"""Released migrations never change: a database that applied one must be
upgradable by the steps after it, so their text is frozen at release
(River's and graphile-worker's rule). A new release adds its digests here;
an edit to a released step fails this test."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RELEASED = {
    "migrations/postgres/0001_fenceq_v1.py": "60ccfc2c38e83b26d220a01330e83d6e6fe803f9cff9765cd42c9e2c3f35d862",
    "migrations/postgres/sql/0001_fenceq_v1.sql": "d921ba706cf68ec3a2c5813d96bb598edfc2217593ed0fe7e126a19e2c6595c6",
    "migrations/sqlite/0001_fenceq_v1.py": "4b7f7bd09a9b8730370ca7784515b79b76d1bcbb88d928fde3d64c38a852518e",
    "migrations/sqlite/sql/0001_fenceq_v1.sql": "358ea05a0b8de3c65620f89c43b137830864bb3512a1498eb5073a28f0d5d7c2",
    "migrations/postgres/0002_fenceq_v2.py": "d9d2f83e7936ce018e45de75cb244d3aa9308ac37e27ba9a1158ffa027539430",
    "migrations/postgres/sql/0002_fenceq_v2.sql": "d72f67770d79beecff18f2798186dc9cff524ca453cd2aec36749f64fcade520",
    "migrations/sqlite/0002_fenceq_v2.py": "b7b564de48da5b7a3731bd190ed1907797be4fab91eec374fc262606a2ba47ef",
    "migrations/postgres/0003_fenceq_v3.py": "763465e4199fc7c1011de55c1decc2ca47de77cb39ba82b4badc4f1e03d59768",
    "migrations/postgres/sql/0003_fenceq_v3.sql": "4a23d2530c151e71503e4914ad7480891acee8ab1c3fad8aa22f008a6e4e54cd",
    "migrations/sqlite/0003_fenceq_v3.py": "3bb00c22de24e7706f8fe1973b0a7f70eaec9c9e1cfee685d1cff7eb1648a5ad",
    "migrations/sqlite/sql/0003_fenceq_v3.sql": "879c84e594bfbc87de64c0d51cae60d31204928e9dff2aeb7523d6390a16c71d",
    "migrations/postgres/0004_fenceq_v4.py": "cf0b2b388ae290589e1bf7f5dc81b50fc960ce8fdfe18d86be3cafeeac4d6a91",
    "migrations/postgres/sql/0004_fenceq_v4.sql": "e44e53e5c418954623523d343feb5f33be431d211a00c2232eb8e083c2856b3c",
    "migrations/sqlite/0004_fenceq_v4.py": "898938d024c0e31026e0f986c8108d24ea17be48b6aab0d384979eadef506796",
    "migrations/sqlite/sql/0004_fenceq_v4.sql": "355b1ea65a407023125d64966f74b7c3b140e93b87744a01d812f5a738369ebe",
    "migrations/postgres/0005_fenceq_v5.py": "5cb4337abdadcec75dbdd263c955507baaf02a4ff765699128f71376d9e85ea2",
    "migrations/postgres/sql/0005_fenceq_v5.sql": "45edbb034d5b775489eb8d314c3ee8db58c8879b45723ccea743465f5441cc58",
    "migrations/sqlite/0005_fenceq_v5.py": "be1824bdd6a4a22a9b3523b7edb75c3eeaf0a9c0c014a83b43bc9e08c1ccf3b2",
    "migrations/sqlite/sql/0005_fenceq_v5.sql": "523a3afb8c8342fe98299e4a1b11ead8843916526b6d1fb8be32b9a11e11bebb",
    "migrations/postgres/0006_fenceq_v6.py": "4efe3e0825e31ce2a5ed68fda935eeef8eeaaeb9d4fe6f8d5220712d7d4efa2a",
    "migrations/postgres/sql/0006_fenceq_v6.sql": "d4a3e02a08ab45af64925565c3c38336c9f5cb3fc0cb704e68ce739f9f5edc10",
    "migrations/sqlite/0006_fenceq_v6.py": "3479ef1143a045c7701682814fc38efe7d346ec2a538a908f5678809c35e5d3f",
    "migrations/sqlite/sql/0006_fenceq_v6.sql": "a452e723851c6c32ae96c955b6d6eeca25e035e3e63751f19828fa90b922abc4",
    "migrations/postgres/0007_fenceq_v7.py": "f08060fa9c9e21bdd1861c6651aed85a9604aa960b45d8a8d01d725e0c11fca5",
    "migrations/postgres/sql/0007_fenceq_v7.sql": "6228a858eb0c9b6659ba65ec4f0b9686919bf3317c3e6e0f45006577c6fd5721",
    "migrations/sqlite/0007_fenceq_v7.py": "dbc76bf4238b267ef0f63576f6ea032df9e77cf98ef75c9851a931e5a076bc99",
    "migrations/sqlite/sql/0007_fenceq_v7.sql": "6c4a30f576383a2914704c64b603684bc851c6f6b255b1a90e516a3ac427d74a",
    "migrations/postgres/0008_fenceq_v8.py": "7992676519fe2983db66d5fddc2205b081c8bcef056d3ab3beb8a028e034a619",
    "migrations/postgres/sql/0008_fenceq_v8.sql": "ecb1e355420dd44a481fd49d34915279475b8345937ef08e5d20496176ca3db4",
    "migrations/sqlite/0008_fenceq_v8.py": "ae655679c6dc55c0f4ad2cd550cbf4dd5f56dac3ad2ef09473642b1d84049dd4",
    "migrations/sqlite/sql/0008_fenceq_v8.sql": "c9c399937f252e3719956f69b31bb678f2f7526cf7c3d7283b6dac8e28965399",
    "migrations/sqlite/sql/0008_fenceq_v8_rollback.sql": "0abc984589befc88f7aa230c0c5d2756e5ba1d40506442d76b3f1e63b9fe4ec0",    "migrations/postgres/0009_fenceq_v9.py": "a136aec924f36e07a39f99808f215b0a15568c2e0d1b127d52489c2008509000",
    "migrations/postgres/sql/0009_fenceq_v9.sql": "afffab8701a00014fdf38dc6a91dacf824cf3c862ebcc03c0ca43365ff8644b8",
}

V1_COMMIT = "8e56bfc"
# The parts as version 1 named them, read from that commit (not from the tree).
V1_PG_FILES = ["010_schema.sql", "020_helpers.sql", "030_queues.sql", "040_submit.sql",
               "050_workers.sql", "060_operators.sql", "070_verify.sql", "090_privileges.sql"]


@pytest.mark.parametrize("path", sorted(RELEASED))
def test_released_migration_text_is_unchanged(path):
    assert hashlib.sha256((ROOT / path).read_bytes()).hexdigest() == RELEASED[path], (
        f"{path} was released and must not change: add a new migration step instead")


def _git_show(path: str) -> str | None:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{V1_COMMIT}:{path}"],
                           capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def test_frozen_v1_is_the_v1_release():
    """The frozen v1 step is byte for byte what version 1 applied."""
    parts = [_git_show(f"sql/postgres/{name}") for name in V1_PG_FILES]
    sqlite_schema = _git_show("sql/sqlite/schema.sql")
    if sqlite_schema is None or None in parts:
        pytest.skip(f"this clone lacks commit {V1_COMMIT}")
    assert (ROOT / "migrations/postgres/sql/0001_fenceq_v1.sql").read_text(encoding="utf-8") == "\n".join(parts)
    assert (ROOT / "migrations/sqlite/sql/0001_fenceq_v1.sql").read_text(encoding="utf-8") == sqlite_schema
