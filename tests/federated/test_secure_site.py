"""A clinic's checks on the coordinator's SecAgg+ messages (``worker.secure_site``), driven by a
hand-built coordinator: each stage's message as Flower's workflow builds it, sent to the clinic's
real answer path (its checks, Flower's ``secaggplus_mod``, its signature). An honest round is
answered to the end; a coordinator that deviates (too few survivors, two survivor lists in one
round, a low threshold, a key of its own in the key sharing) is refused before the clinic
hands over a share."""

import base64
import json
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.app import ConfigRecord, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes

from app.federation import signing
from tests.federated.plans import part
from worker.federated_site import RoundRefused, SiteRun
from worker.secure_aggregation import FIELD, SETUP_ANSWERS, pack, unpack

NODES = {"a": 11, "b": 12, "c": 13, "d": 14}
NONCE = "f" * 32


class _Clinic:
    """A clinic's run as ``SiteRun.secure_answer`` reads it (the real code checks, answers
    through Flower's mod and signs); its round adds 1 to every weight."""

    secure_answer = SiteRun.secure_answer
    signed = SiteRun.signed

    def __init__(self, site: str, key: Ed25519PrivateKey, declared: dict[str, str | None],
                 min_sites: int) -> None:
        self.site, self.key, self.stages, self.node = site, key, None, NODES[site]
        self.part = part(site, min_sites=min_sites, site_keys=declared)
        self.trained = 0

    def run_round(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        self.trained += 1
        return [a + 1.0 for a in arrays]

    def figures(self) -> dict[str, Any]:
        return {"steps": 1, "epsilon": 3.0, "delta": 1e-6}


class _Coordinator:
    """Flower's SecAgg+ workflow's messages, by hand, to ``clinics`` (one round, all sharing
    with all): each stage can be sent as an honest coordinator would, or altered."""

    def __init__(self, clinics: list[_Clinic]) -> None:
        self.clinics = {clinic.node: clinic for clinic in clinics}
        self.keys: dict[int, list[bytes]] = {}
        self.setups: dict[str, dict[str, str]] = {}
        self.forwards: dict[int, list[tuple[int, bytes]]] = {node: [] for node in self.clinics}

    def ask(self, node: int, stage: dict[str, Any], content: RecordDict | None = None
            ) -> ConfigRecord:
        content = content if content is not None else RecordDict()
        content.config_records[RECORD_KEY_CONFIGS] = ConfigRecord(stage)
        answer = self.clinics[node].secure_answer({
            FIELD: pack(content), "node": node, "server_round": 1, "nonce": NONCE,
            SETUP_ANSWERS: json.dumps(self.setups), "weight": 1})
        if node not in self.keys:  # its setup answer: its keys, signed
            self.setups[str(node)] = {"site": answer["site"], "signature": answer["signature"],
                                      "payload": base64.b64encode(answer[FIELD]).decode()}
        return unpack(answer[FIELD]).config_records[RECORD_KEY_CONFIGS]

    def setup(self, threshold: int) -> None:
        for node in self.clinics:
            keys = self.ask(node, {
                Key.STAGE: Stage.SETUP, Key.SAMPLE_NUMBER: len(self.clinics),
                Key.SHARE_NUMBER: len(self.clinics), Key.THRESHOLD: threshold,
                Key.CLIPPING_RANGE: 16.0, Key.TARGET_RANGE: 1 << 22, Key.MOD_RANGE: 1 << 32,
                Key.MAX_WEIGHT: 1e6})
            self.keys[node] = [keys[Key.PUBLIC_KEY_1], keys[Key.PUBLIC_KEY_2]]

    def share_keys(self, node: int, keys: dict[int, list[bytes]] | None = None) -> None:
        sent = keys if keys is not None else self.keys
        shares = self.ask(node, {Key.STAGE: Stage.SHARE_KEYS,
                                 **{str(n): pair for n, pair in sent.items()}})
        for dst, ciphertext in zip(shares[Key.DESTINATION_LIST], shares[Key.CIPHERTEXT_LIST],
                                   strict=True):
            self.forwards[dst].append((node, ciphertext))

    def collect(self, node: int) -> None:
        content = compat.fitins_to_recorddict(
            FitIns(ndarrays_to_parameters([np.zeros(3, np.float32)]), {}), True)
        self.ask(node, {Key.STAGE: Stage.COLLECT_MASKED_VECTORS,
                        Key.CIPHERTEXT_LIST: [c for _, c in self.forwards[node]],
                        Key.SOURCE_LIST: [s for s, _ in self.forwards[node]]}, content)

    def unmask(self, node: int, active: list[str], dead: list[str]) -> ConfigRecord:
        return self.ask(node, {Key.STAGE: Stage.UNMASK,
                               Key.ACTIVE_NODE_ID_LIST: [NODES[s] for s in active],
                               Key.DEAD_NODE_ID_LIST: [NODES[s] for s in dead]})

    def through_masked_vectors(self, threshold: int) -> None:
        self.setup(threshold)
        for node in self.clinics:
            self.share_keys(node)
        for node in self.clinics:
            self.collect(node)


def _federation(sites: str, min_sites: int = 2, keyed: bool = True) -> _Coordinator:
    keys = {site: Ed25519PrivateKey.generate() for site in sites}
    declared = {site: signing.public_of(key) if keyed else None for site, key in keys.items()}
    return _Coordinator([_Clinic(site, keys[site], declared, min_sites) for site in sites])


@pytest.mark.parametrize("keyed", [True, False])
def test_an_honest_round_is_answered_to_its_unmasking(keyed: bool) -> None:
    coordinator = _federation("abc", keyed=keyed)
    coordinator.through_masked_vectors(threshold=2)
    for node in coordinator.clinics:  # c's masked vector lost: its masks rebuilt
        shares = coordinator.unmask(node, ["a", "b"], ["c"]) if node != NODES["c"] else None
        assert shares is None or len(shares[Key.SHARE_LIST]) == 3
    assert all(clinic.trained == 1 for clinic in coordinator.clinics.values())


@pytest.mark.parametrize(("min_sites", "active", "dead"), [
    (2, ["a"], ["b", "c"]),  # the sum of one site is its update
    (3, ["a", "b"], ["c"]),  # a clinic that declared 3 refuses a sum of 2
])
def test_a_clinic_refuses_to_unmask_fewer_survivors_than_its_minimum(
        min_sites: int, active: list[str], dead: list[str]) -> None:
    coordinator = _federation("abc", min_sites=min_sites)
    coordinator.through_masked_vectors(threshold=min_sites)
    with pytest.raises(RoundRefused, match="survivors: fewer than this clinic's minimum"):
        coordinator.unmask(NODES["a"], active, dead)


def test_a_clinic_refuses_a_second_survivor_list_in_one_round() -> None:
    """Asked for shares of c's mask seed (c survived), then of c's key (c dropped): with both,
    c's masked vector could be unmasked alone."""
    coordinator = _federation("abc")
    coordinator.through_masked_vectors(threshold=2)
    coordinator.unmask(NODES["a"], ["a", "b", "c"], [])
    with pytest.raises(RoundRefused, match="two different survivor lists in one round"):
        coordinator.unmask(NODES["a"], ["a", "b"], ["c"])


@pytest.mark.parametrize(("active", "dead"), [
    (["b", "c"], ["a"]),  # told it dropped: it would hand over its own key's share
    (["a", "b", "c"], ["c"]),  # c both survived and dropped
    (["a", "b", "d"], []),  # d shared no keys in this round
])
def test_a_clinic_refuses_survivor_lists_that_are_not_apart_among_its_sharers(
        active: list[str], dead: list[str]) -> None:
    coordinator = _federation("abc")
    coordinator.through_masked_vectors(threshold=2)
    with pytest.raises(RoundRefused, match="not apart"):
        coordinator.unmask(NODES["a"], active, dead)


def test_a_threshold_below_a_strict_majority_is_refused_before_any_share() -> None:
    """Four sites at threshold 2: the coordinator could tell a and d that d survived and b
    and c that it dropped, and rebuild d's seed from two shares and its key from two others."""
    coordinator = _federation("abcd")
    coordinator.setup(threshold=2)
    with pytest.raises(RoundRefused, match="not a strict majority of the 4 sites"):
        coordinator.share_keys(NODES["a"])
    assert coordinator.clinics[NODES["a"]].trained == 0


def test_a_threshold_below_the_clinics_minimum_is_refused_at_setup() -> None:
    coordinator = _federation("abc", min_sites=3)
    with pytest.raises(RoundRefused, match="below this clinic's minimum of 3 sites"):
        coordinator.setup(threshold=2)


def test_a_key_sharing_with_too_few_or_too_many_sites_is_refused() -> None:
    coordinator = _federation("abc", min_sites=3)
    coordinator.setup(threshold=3)
    two = {node: pair for node, pair in coordinator.keys.items() if node != NODES["c"]}
    with pytest.raises(RoundRefused, match="holds 2 sites"):
        coordinator.share_keys(NODES["a"], two)
    extra = {**coordinator.keys, NODES["d"]: [b"x" * 65, b"y" * 65]}
    with pytest.raises(RoundRefused, match="holds 4 sites"):
        coordinator.share_keys(NODES["a"], extra)


def test_keys_the_coordinator_made_itself_are_refused_in_a_keyed_federation() -> None:
    """c's keys swapped for a pair the coordinator made: a's shares for c would be readable by
    the coordinator. Then c's own signed keys named as another site's."""
    coordinator = _federation("abc")
    coordinator.setup(threshold=2)
    made = [public_key_to_bytes(generate_key_pairs()[1]) for _ in range(2)]
    forged = {**coordinator.keys, NODES["c"]: made}
    with pytest.raises(RoundRefused, match="not signed for this round by a declared site"):
        coordinator.share_keys(NODES["a"], forged)
    coordinator.setups[str(NODES["c"])]["site"] = "b"  # c's answer named as b's
    with pytest.raises(RoundRefused, match="not signed for this round"):
        coordinator.share_keys(NODES["a"])


def test_shares_from_a_site_outside_the_key_sharing_are_refused() -> None:
    coordinator = _federation("abc")
    coordinator.setup(threshold=2)
    for node in coordinator.clinics:
        coordinator.share_keys(node)
    coordinator.forwards[NODES["a"]] = coordinator.forwards[NODES["a"]][:1]
    coordinator.forwards[NODES["a"]].append((NODES["d"], b"z"))
    with pytest.raises(RoundRefused, match="did not share keys in this round"):
        coordinator.collect(NODES["a"])
    assert coordinator.clinics[NODES["a"]].trained == 0  # refused before its round ran
