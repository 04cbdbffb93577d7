"""``dpcrisis keys create | list | revoke``: key management for the operator on the server.

Whoever can run this can read the database anyway, so it needs no API key; its audit events
name the actor ``cli``. ``create`` prints only the key on stdout (``KEY=$(dpcrisis keys create
...)`` works in a script) and its description on stderr.
"""

import argparse
import sys

from app.auth import service
from app.auth.models import ROLES
from app.auth.principal import Principal
from app.auth.schemas import KeyOut
from app.core.database import get_database
from app.core.errors import DomainError


def _create(args: argparse.Namespace) -> int:
    with get_database().session_scope() as session:
        key, secret = service.create(session=session, name=args.name, role=args.role,
                                     principal=Principal.cli())
    print(secret)
    print(f"created {key.role} key {key.name!r} (id {key.id}, {key.display_id}); it is "
          "shown this once and stored only as a hash: keep it now", file=sys.stderr)
    return 0


def _list(_args: argparse.Namespace) -> int:
    with get_database().session_scope() as session:
        keys, _ = service.list_page(session=session, limit=10**9, offset=0)
        rows = [KeyOut.model_validate(k) for k in keys]
    print(f"{'id':>4}  {'name':<24} {'role':<16} {'public id':<17} {'created':<20} revoked")
    for row in rows:
        created = f"{row.created_at:%Y-%m-%d %H:%M:%S}"
        revoked = "" if row.revoked_at is None else f"{row.revoked_at:%Y-%m-%d %H:%M:%S}"
        print(f"{row.id:>4}  {row.name:<24} {row.role:<16} {row.prefix:<17} "
              f"{created:<20} {revoked}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    with get_database().session_scope() as session:
        key = service.find(session=session, name_or_id=args.key)
        was_revoked = key.revoked_at is not None
        service.revoke(session=session, key=key, principal=Principal.cli())
    print(f"key {key.name!r} (id {key.id}) {'was already' if was_revoked else 'is now'} revoked")
    return 0


def _run(args: argparse.Namespace) -> int:
    from app.core.migrations import upgrade_head

    upgrade_head()  # the first command on a fresh database may be `keys create`
    try:
        return int(args.keys_func(args))
    except DomainError as error:
        print(f"dpcrisis keys: {error.detail}", file=sys.stderr)
        return 2


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``keys`` and its sub-commands to the ``dpcrisis`` parser."""
    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    keys.set_defaults(func=_run)
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="create a key; prints it once")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--name", required=True, help="unique; who or what holds the key")
    create.set_defaults(keys_func=_create)
    actions.add_parser("list", help="list keys (never the keys themselves)").set_defaults(
        keys_func=_list)
    revoke = actions.add_parser("revoke", help="revoke a key by name or id")
    revoke.add_argument("key", help="the key's name, or its id")
    revoke.set_defaults(keys_func=_revoke)
