"""What the catalog grants on schema fenceq, read the same way by the
security catalog tests and by scripts/gen-privileges (which writes the
golden list tests/golden_privileges.json from a fresh install)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

GOLDEN_PRIVILEGES = Path(__file__).resolve().parent / "golden_privileges.json"

# Every object of the schema with its owner and its effective ACL (a NULL ACL
# is PostgreSQL's default for the kind, which for functions and types grants
# PUBLIC). Row types of tables and views and array types carry no ACL of
# their own; column ACLs are listed only where one was granted.
_OBJECTS = """
SELECT 'schema ' || n.nspname AS object, n.nspowner AS owner,
       coalesce(n.nspacl, acldefault('n', n.nspowner)) AS acl
  FROM pg_namespace AS n WHERE n.nspname = 'fenceq'
UNION ALL
SELECT CASE c.relkind WHEN 'v' THEN 'view ' WHEN 'm' THEN 'materialized view '
                      WHEN 'S' THEN 'sequence ' WHEN 'f' THEN 'foreign table ' ELSE 'table ' END
       || c.oid::regclass::text,
       c.relowner, coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))
  FROM pg_class AS c
 WHERE c.relnamespace = 'fenceq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
UNION ALL
SELECT 'column ' || c.oid::regclass::text || '.' || quote_ident(a.attname), c.relowner, a.attacl
  FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'fenceq'::regnamespace AND a.attacl IS NOT NULL
UNION ALL
SELECT CASE p.prokind WHEN 'p' THEN 'procedure ' WHEN 'a' THEN 'aggregate ' ELSE 'function ' END
       || 'fenceq.' || quote_ident(p.proname),
       p.proowner, coalesce(p.proacl, acldefault('f', p.proowner))
  FROM pg_proc AS p WHERE p.pronamespace = 'fenceq'::regnamespace
UNION ALL
SELECT 'type ' || t.oid::regtype::text, t.typowner, coalesce(t.typacl, acldefault('T', t.typowner))
  FROM pg_type AS t LEFT JOIN pg_class AS c ON c.oid = t.typrelid
 WHERE t.typnamespace = 'fenceq'::regnamespace AND t.typcategory <> 'A'
   AND (c.oid IS NULL OR c.relkind = 'c')
"""

PRIVILEGES = f"""
WITH objects AS ({_OBJECTS})
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
       a.privilege_type || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END,
       o.object
  FROM objects AS o, aclexplode(o.acl) AS a
 WHERE a.grantee <> o.owner
"""

OWNERS = f"WITH objects AS ({_OBJECTS}) SELECT o.object, o.owner::regrole::text FROM objects AS o"


def privileges(conn: psycopg.Connection) -> dict[str, dict[str, list[str]]]:
    """grantee -> privilege -> the objects it holds it on (sorted), for
    every grantee but each object's owner."""
    granted: dict[str, dict[str, list[str]]] = {}
    for grantee, privilege, name in conn.execute(PRIVILEGES).fetchall():
        granted.setdefault(grantee, {}).setdefault(privilege, []).append(name)
    return {grantee: {privilege: sorted(names) for privilege, names in sorted(held.items())}
            for grantee, held in sorted(granted.items())}


def golden() -> dict[str, dict[str, list[str]]]:
    return json.loads(GOLDEN_PRIVILEGES.read_text(encoding="utf-8"))


def write_golden(granted: dict[str, dict[str, list[str]]]) -> None:
    GOLDEN_PRIVILEGES.write_text(json.dumps(granted, indent=2) + "\n", encoding="utf-8")
