"""A clinic's side of secure aggregation: Flower's ``secaggplus_mod`` answers each stage, after
the clinic's own checks of what the coordinator asks.

Flower's mod takes the protocol's parameters from the coordinator: the reconstruction threshold
from the setup message, the other sites' keys from the key sharing, and the survivors and the
dropped sites from the unmask request, whose shares it then hands over (of a survivor's mask
seed, of a dropped site's mask key). A coordinator that deviates could ask for a low threshold,
run a round with one real site and keys it made itself, or tell some clinics that site X
survived and others that X dropped: with shares of both X's seed and X's key, X's own update
comes out unmasked. So each clinic checks every stage against its own declaration of the
federation (its ``min_sites``, the declared sites and their keys) before the mod answers:

- setup: the threshold is at least the clinic's minimum;
- key sharing: the sites holding keys are at least its minimum and at most the declared sites,
  and the threshold is a strict majority of them, so no two disjoint groups of clinics can each
  give enough shares to rebuild one secret, once as a seed and once as a key; when the
  federation keys its sites, each holder's keys are signed for this round by a different
  declared site (no key the coordinator made holds a share);
- masked vectors: the shares forwarded come from the key holders, itself and them at least
  its minimum;
- unmask: it is among the survivors; the survivors and the dropped are apart, among the sites
  whose shares it holds; the survivors are at least its minimum; and a second request after
  the same key sharing names the same lists.

A refusal raises ``Unsafe``: the clinic's Flower client ends on it (Flower's legacy client
stops on an exception), so the coordinator sees the clinic drop out, and the clinic's job and
log say why. What the checks cannot stop is in ``docs/privacy.md`` (Federations).
"""

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from google.protobuf.message import DecodeError

from app.federation import signing
from app.federation.schemas import FederationPart
from worker.secure_aggregation import (
    FIELD,
    SETUP_ANSWERS,
    UPDATE_RANGE,
    kind_of,
    pack,
    stage_of,
    unpack,
)


class Unsafe(RuntimeError):
    """A stage this clinic will not answer: what the coordinator asked fails its checks."""


@dataclass(frozen=True)
class Declared:
    """What the clinic itself declared of the federation: what its checks hold a round to."""

    federation: str
    site: str
    min_sites: int  # its recipe's min_sites: the fewest sites it lets a sum be unmasked over
    keys: dict[str, str | None]  # every declared site's public key (None: no site keyed)

    @classmethod
    def of(cls, part: FederationPart) -> "Declared":
        """From a federated job's part (``app.federation.plan``)."""
        return cls(federation=part.name, site=part.site, min_sites=max(2, part.min_sites),
                   keys=dict(part.site_keys))

    @property
    def keyed(self) -> bool:
        return any(self.keys.values())


def _ids(values: Any, what: str) -> list[int]:
    if not isinstance(values, list) or not all(type(v) is int for v in values):
        raise Unsafe(f"the {what} is not a list of node ids")
    if len(set(values)) != len(values):
        raise Unsafe(f"the {what} names a node twice")
    return values


class RoundChecks:
    """One clinic's checks across the stages of one key sharing (reset by each setup)."""

    def __init__(self, declared: Declared) -> None:
        self.declared = declared
        self._reset(-1, 0)

    def _reset(self, node: int, threshold: int) -> None:
        self.node = node  # this clinic's node id in the round (the setup's)
        self.threshold = threshold
        self.holders: frozenset[int] = frozenset()  # the sites it shared keys with, itself too
        self.sharers: frozenset[int] = frozenset()  # whose shares it holds, itself too
        self.unmasked: tuple[frozenset[int], frozenset[int]] | None = None

    def check(self, stage: str, configs: ConfigRecord, node: int, config: dict[str, Any]
              ) -> None:
        """Raise ``Unsafe`` unless this stage's message passes (``config``: the fit call's,
        with the round, its nonce and the forwarded setup answers)."""
        if stage == Stage.SETUP:
            self._setup(configs, node)
        elif node != self.node:
            raise Unsafe(f"a {stage} message for node {node}, not this round's node {self.node}")
        elif stage == Stage.SHARE_KEYS:
            self._share_keys(configs, config)
        elif stage == Stage.COLLECT_MASKED_VECTORS:
            self._collect(configs)
        elif stage == Stage.UNMASK:
            self._unmask(configs)

    def _setup(self, configs: ConfigRecord, node: int) -> None:
        self._reset(-1, 0)  # a new key sharing: nothing of the last one holds
        threshold = configs.get(Key.THRESHOLD)
        if type(threshold) is not int or threshold < self.declared.min_sites:
            raise Unsafe(f"the reconstruction threshold {threshold!r} is below this clinic's "
                         f"minimum of {self.declared.min_sites} sites")
        self._reset(node, threshold)

    def _share_keys(self, configs: ConfigRecord, config: dict[str, Any]) -> None:
        try:
            keys = {int(k): v for k, v in configs.items() if k != Key.STAGE}
        except ValueError as exc:
            raise Unsafe("the key sharing names something that is not a node id") from exc
        least, declared = self.declared.min_sites, len(self.declared.keys)
        if self.node not in keys or not least <= len(keys) <= declared:
            raise Unsafe(f"the key sharing holds {len(keys)} sites: this clinic takes part with "
                         f"at least {least} and at most the {declared} declared, itself among "
                         "them")
        if 2 * self.threshold <= len(keys):
            raise Unsafe(f"the threshold {self.threshold} is not a strict majority of the "
                         f"{len(keys)} sites sharing keys")
        if self.declared.keyed:
            self._signed(keys, config)
        self.holders = frozenset(keys)

    def _signed(self, keys: dict[int, Any], config: dict[str, Any]) -> None:
        """Each holder's keys signed for this round by a different declared site, its own by
        this clinic."""
        try:
            answers = json.loads(str(config.get(SETUP_ANSWERS) or "{}"))
        except ValueError as exc:
            raise Unsafe("the key sharing's setup answers cannot be read") from exc
        named: dict[int, str] = {}
        for node, pair in keys.items():
            answer = answers.get(str(node)) if isinstance(answers, dict) else None
            site = str(answer.get("site", "")) if isinstance(answer, dict) else ""
            if site in named.values() or not self._signed_by(site, answer, pair, config):
                raise Unsafe(f"node {node}'s keys are not signed for this round by a declared "
                             "site of its own")
            named[node] = site
        if named[self.node] != self.declared.site:
            raise Unsafe("this clinic's own keys are named as another site's")

    def _signed_by(self, site: str, answer: Any, pair: Any, config: dict[str, Any]) -> bool:
        key = self.declared.keys.get(site)
        if not key or not isinstance(answer, dict):
            return False
        try:
            payload = base64.b64decode(str(answer.get("payload", "")), validate=True)
            sent = unpack(payload).config_records[RECORD_KEY_CONFIGS]
            pair_sent = [sent[Key.PUBLIC_KEY_1], sent[Key.PUBLIC_KEY_2]]
        except (binascii.Error, DecodeError, KeyError, ValueError):
            return False
        signed = signing.message(
            federation=self.declared.federation, site=site, kind=kind_of(Stage.SETUP),
            server_round=int(config.get("server_round", 0)), nonce=str(config.get("nonce", "")),
            payload_sha256=hashlib.sha256(payload).hexdigest(), figures={})
        return pair_sent == list(pair) and signing.verifies(
            key, signed, str(answer.get("signature", "")))

    def _collect(self, configs: ConfigRecord) -> None:
        sources = set(_ids(configs.get(Key.SOURCE_LIST), "list of share sources"))
        if not sources <= self.holders - {self.node}:
            raise Unsafe("shares forwarded from sites that did not share keys in this round")
        if len(sources) + 1 < self.declared.min_sites:
            raise Unsafe(f"shares from {len(sources)} other sites: with this clinic fewer than "
                         f"its minimum of {self.declared.min_sites}")
        self.sharers = frozenset(sources | {self.node})

    def _unmask(self, configs: ConfigRecord) -> None:
        active = frozenset(_ids(configs.get(Key.ACTIVE_NODE_ID_LIST), "survivor list"))
        dead = frozenset(_ids(configs.get(Key.DEAD_NODE_ID_LIST), "dropped list"))
        if self.node not in active or active & dead or not active | dead <= self.sharers:
            raise Unsafe("the survivor and dropped lists are not apart among the sites whose "
                         "shares this clinic holds, or leave it out of the survivors")
        if len(active) < self.declared.min_sites:
            raise Unsafe(f"{len(active)} survivors: fewer than this clinic's minimum of "
                         f"{self.declared.min_sites} sites")
        if self.unmasked is not None and self.unmasked != (active, dead):
            raise Unsafe("asked to unmask for two different survivor lists in one round")
        self.unmasked = (active, dead)


class SiteStages:
    """A site's side: each stage's message checked, then through Flower's mod, with one state
    across them."""

    def __init__(self, train: Callable[[list[np.ndarray]], list[np.ndarray]],
                 figures: Callable[[], dict[str, Any]], declared: Declared) -> None:
        self.train, self.figures = train, figures
        self.checks = RoundChecks(declared)
        self.context = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(),
                               run_config={})
        self.clipped = 0  # update values clipped to UPDATE_RANGE, over the rounds
        self.rounds = 0  # rounds trained through the protocol

    def answer(self, config: dict[str, Any]) -> tuple[str, bytes]:
        """The stage this message is in, and this site's answer to it (to sign and send).

        Raises:
            Unsafe: the message fails this clinic's checks (``RoundChecks``).
        """
        content = unpack(bytes(config[FIELD]))
        stage = stage_of(content)
        node = int(config["node"])
        self.checks.check(stage, content.config_records[RECORD_KEY_CONFIGS], node, config)
        message = Message(content, node, "train", group_id=str(config.get("server_round", "")))
        weight = int(config.get("weight", 0))

        def next_step(message: Message, context: Context) -> Message:
            fit = compat.recorddict_to_fitins(message.content, keep_input=True)
            start = parameters_to_ndarrays(fit.parameters)
            update = [w - s for w, s in zip(self.train(start), start, strict=True)]
            self.rounds += 1
            self.clipped += int(sum(np.count_nonzero(np.abs(u) > UPDATE_RANGE) for u in update))
            update = [np.clip(u, -UPDATE_RANGE, UPDATE_RANGE) for u in update]
            res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(update), weight,
                         self.figures())
            return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=message)

        reply = secaggplus_mod(message, self.context, next_step)
        return stage, pack(reply.content)
