"""Table definitions, mirroring the reviewed migrations in alembic/versions/.

`memory` and `memory_event` are TimescaleDB hypertables when the extension is present and
plain tables otherwise; the columns and the code are the same either way. A hypertable's
unique constraints must include its time column, so key uniqueness per namespace lives in
the plain `memory_key` lookup table, which also gives (id, created_at) for chunk pruning.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    Sequence,
    String,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TS = DateTime(timezone=True)


class Base(DeclarativeBase):
    pass


class Namespace(Base):
    __tablename__ = "namespace"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Robot(Base):
    __tablename__ = "robot"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespace.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    # NULL means "the deployment default" (Settings.working_memory_budget).
    working_memory_budget: Mapped[int | None] = mapped_column(Integer)
    # Redis may still hold removals it missed while unreachable: rebuild before next use.
    working_memory_stale: Mapped[bool] = mapped_column(Boolean, server_default="false")
    # The last working-memory change Postgres recorded (app/working_memory/protocol.py).
    wm_gen: Mapped[int | None] = mapped_column(BigInteger)
    wm_seq: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    last_seen_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


memory_id_seq = Sequence("memory_id_seq")


class Memory(Base):
    __tablename__ = "memory"

    id: Mapped[int] = mapped_column(
        BigInteger, memory_id_seq, server_default=memory_id_seq.next_value(), primary_key=True
    )
    created_at: Mapped[datetime] = mapped_column(TS, primary_key=True, server_default=func.now())
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespace.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(String(32), server_default="fact")
    importance: Mapped[float] = mapped_column(Float, server_default="1")
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default="{}")
    author_robot_id: Mapped[int] = mapped_column(ForeignKey("robot.id", ondelete="CASCADE"))
    token_count: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[list[float] | None] = mapped_column(Vector())
    embedding_model: Mapped[str | None] = mapped_column(String(200))
    # 'ready', 'pending' (embedded by the background worker) or 'failed' (it gave up).
    embedding_status: Mapped[str] = mapped_column(String(16), server_default="pending")
    embedding_attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    embedding_next_at: Mapped[datetime | None] = mapped_column(TS)
    embedding_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    deleted_at: Mapped[datetime | None] = mapped_column(TS)
    # Bumped by every replace; a placement into working memory names the version it read.
    version: Mapped[int] = mapped_column(Integer, server_default="1")
    content_tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english'::regconfig, content)", persisted=True)
    )


class MemoryKey(Base):
    __tablename__ = "memory_key"

    namespace_id: Mapped[int] = mapped_column(
        ForeignKey("namespace.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    memory_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    memory_created_at: Mapped[datetime] = mapped_column(TS)


class WorkingMemoryItem(Base):
    """Working-memory membership as Postgres knows it: the source for rebuilding Redis.

    Rows change under the robot's row lock, in the order Redis applied the changes; `seq`
    is the change that last wrote the row. `stale_at`: the robot holds an old copy of a
    replaced or forgotten memory until its Redis working memory lets go of it.
    """

    __tablename__ = "working_memory_item"

    robot_id: Mapped[int] = mapped_column(
        ForeignKey("robot.id", ondelete="CASCADE"), primary_key=True
    )
    memory_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    memory_created_at: Mapped[datetime] = mapped_column(TS)
    in_working_memory: Mapped[bool] = mapped_column(Boolean)
    seq: Mapped[int] = mapped_column(BigInteger)
    added_at: Mapped[datetime] = mapped_column(TS)
    last_access_at: Mapped[datetime] = mapped_column(TS)
    from_recall: Mapped[bool] = mapped_column(Boolean, server_default="false")
    stale_at: Mapped[datetime | None] = mapped_column(TS)


class MemoryEvent(Base):
    """Append-only activity log: add, recall, evict, forget, restore, access."""

    __tablename__ = "memory_event"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(TS, primary_key=True, server_default=func.now())
    namespace_id: Mapped[int] = mapped_column(BigInteger)
    robot_id: Mapped[int | None] = mapped_column(BigInteger)
    memory_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")


class ApiKey(Base):
    __tablename__ = "api_key"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespace.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[str] = mapped_column(String(16))
    # sha256 of the secret: keys are high-entropy, so a fast hash is the right tool and
    # the unique index makes lookup O(1).
    key_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(TS)
    last_used_at: Mapped[datetime | None] = mapped_column(TS)
