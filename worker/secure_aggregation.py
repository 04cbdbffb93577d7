"""Secure aggregation for a federation that requires it: Flower's SecAgg+ over the rounds' links.

Flower 1.32 ships SecAgg+ (Bell et al. 2020) as a server workflow (``SecAggPlusWorkflow``:
setup, key sharing, masked vectors, unmasking) that talks to a ``Grid``, and a client mod
(``secaggplus_mod``) that answers it. Its deployment engine would run a clinic's client in
another process, polled every 3 s; here the coordinator is Flower's ``start_server`` and each
clinic's own worker (its lease, its rows, its ledger) is the client. So this module is only
the glue: a ``Grid`` whose messages travel to the connected sites as Flower fit calls (each
stage's message in Flower's own protobuf form), and, on the site (``worker.secure_site``), the
mod called on that message with the round's training as its next step, behind the clinic's own
checks of what it is asked. The protocol, its keys, secret shares, masks and quantisation are
Flower's.

What a site sends in a secure round: its update (its noisy weights minus the global ones, each
value clipped to +-``UPDATE_RANGE``) scaled by its public weight, quantised and masked. The
coordinator learns only the weighted sum over the sites that finished the round (the masks
cancel, a dropped site's are rebuilt from the others' shares), which it adds to the global
model. When the federation keys its sites, every stage's answer is signed by the site over the
bytes it carries, the stage, the round and the round's fresh nonce, and the key sharing
forwards each site's signed setup answer, so that every clinic can check whose keys it shares
with.
"""

import base64
import hashlib
import json
import secrets
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Protocol, cast

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common import FitIns, Parameters, bytes_to_ndarray, parameters_to_ndarrays, serde
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto
from flwr.server import LegacyContext, Server, ServerConfig, SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid
from flwr.supercore.run import Run

FIELD = "secagg"  # the stage's message (coordinator to site) and its answer (site to coordinator)
SETUP_ANSWERS = "secagg_setup_answers"
"""The key sharing's field holding every site's signed setup answer (its public keys): each
clinic checks that the keys it is sent are declared sites' (``worker.secure_site``)."""
UPDATE_RANGE = 16.0
"""A site's update values are clipped to +-this before masking (SecAgg+ quantises a fixed range:
2^22 levels over it, a resolution of 7.6e-6)."""
WEIGHT_SCALE = 1_000_000
"""Public weights travel as Flower's integer example counts: the largest declared weight is this."""


def pack(content: RecordDict) -> bytes:
    return serde.recorddict_to_proto(content).SerializeToString()


def unpack(data: bytes) -> RecordDict:
    proto = RecordDictProto()
    proto.ParseFromString(data)
    return serde.recorddict_from_proto(proto)


def stage_of(content: RecordDict) -> str:
    return str(content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])


def kind_of(stage: str) -> str:
    """What a site signs a stage's answer as (``signing``'s kinds, one per stage)."""
    return f"secagg-{stage}"


class Answers(Protocol):
    """What the grid asks of the coordinator's strategy."""

    weights: dict[str, float]

    def round_config(self, server_round: int) -> dict[str, bool | bytes | float | int | str]: ...

    def authentic(self, site: str, kind: str, server_round: int, metrics: dict[str, Any],
                  payload_sha256: str) -> bool: ...

    def acceptable(self, server_round: int, site: str, metrics: dict[str, Any],
                   arrays: list[np.ndarray]) -> bool: ...

    def on_secure_round(self, server_round: int, arrays: list[np.ndarray],
                        grid: "SiteGrid | None") -> None: ...


def masked_answer(payload: bytes) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A masked-vector answer's figures and its masked arrays, less the weight factor Flower
    puts first (so that they have the model's shapes). Raises ValueError: not such an answer."""
    try:
        content = unpack(payload)
        fit = compat.recorddict_to_fitres(content, keep_input=True)
        listed = cast(list[bytes], content.config_records[RECORD_KEY_CONFIGS][
            Key.MASKED_PARAMETERS])
        masked = [bytes_to_ndarray(bytes(b)) for b in listed]
    except Exception as exc:  # protobuf and Flower's parsers raise many kinds
        raise ValueError(f"not a masked-vector answer: {type(exc).__name__}") from exc
    if not masked or masked[0].shape != (1,):
        raise ValueError("a masked vector without its weight factor")
    return dict(fit.metrics), masked[1:]


class NumberedClients(SimpleClientManager):
    """Flower's client manager, giving each connection a node id: SecAgg+ addresses its sites by
    id, and the legacy gRPC connections carry none."""

    def register(self, client: ClientProxy) -> bool:
        if getattr(client, "node_id", None) is None:
            client.node_id = secrets.randbits(62) + 1
        return super().register(client)


class Refused(RuntimeError):
    """An answer that is not the site's it names (or names a site bound to another node)."""


class SiteGrid(Grid):
    """A ``Grid`` over the connected sites: each message is a fit call on the node's connection,
    its answer checked (a declared site, its signature, one node per site) before the workflow
    sees it; an answer that fails is dropped, as a site that did not answer."""

    def __init__(self, clients: SimpleClientManager, answers: Answers, server_round: int,
                 timeout: float | None) -> None:
        self.clients, self.answers, self.server_round = clients, answers, server_round
        self.timeout = timeout
        self.sites: dict[int, str] = {}  # node id -> the site its signed answers named
        self.setups: dict[str, dict[str, str]] = {}  # node id -> its signed setup answer
        self.refused: set[str] = set()
        self.dropped: list[str] = []  # authentic masked vectors off the plan or the model
        self._run = Run.create_empty(run_id=0)
        self._pool = ThreadPoolExecutor(64, thread_name_prefix="secagg")
        self._sent: dict[str, Future[Message]] = {}

    def set_run(self, run: Run) -> None:  # one round of one federation: no runs to switch
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return [client.node_id for client in self.clients.all().values()]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            ids.append(str(uuid.uuid4()))
            self._sent[ids[-1]] = self._pool.submit(self._deliver, message)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The answers that arrived and passed the checks (each pulled once)."""
        replies = []
        for message_id in message_ids:
            future = self._sent.get(message_id)
            if future is None or not future.done():
                continue
            del self._sent[message_id]
            if future.exception() is None:
                replies.append(future.result())
        return replies

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        ids = list(self.push_messages(messages))
        wait([self._sent[i] for i in ids], timeout=timeout or self.timeout)
        return self.pull_messages(ids)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _deliver(self, message: Message) -> Message:
        node = message.metadata.dst_node_id
        proxy = next((c for c in self.clients.all().values() if c.node_id == node), None)
        if proxy is None:
            raise Refused(f"node {node} is no longer connected")
        stage = stage_of(message.content)
        config = {**self.answers.round_config(self.server_round), FIELD: pack(message.content),
                  "node": node, "stage": stage}
        if stage == Stage.SHARE_KEYS:  # whose keys these are, for each clinic to check
            config[SETUP_ANSWERS] = json.dumps(self.setups, sort_keys=True)
        if stage == Stage.COLLECT_MASKED_VECTORS:  # the site's public weight, as a count
            config["weight"] = self._scaled_weight(self.sites.get(node, ""))
        fit = proxy.fit(FitIns(Parameters([], "numpy.ndarray"), config), timeout=self.timeout,
                        group_id=self.server_round)
        return Message(unpack(self._checked(node, stage, fit.metrics)), reply_to=message)

    def _scaled_weight(self, site: str) -> int:
        if site not in self.answers.weights:
            raise Refused("masked vectors asked of a node no site's setup answer named")
        top = max(self.answers.weights.values())
        return max(1, round(self.answers.weights[site] / top * WEIGHT_SCALE))

    def _checked(self, node: int, stage: str, metrics: dict[str, Any]) -> bytes:
        """The answer's payload, if the site it names sent it: else Refused (and noted)."""
        site, payload = str(metrics.get("site", "")), metrics.get(FIELD)
        figures = {k: v for k, v in metrics.items() if k != FIELD}
        bound = self.sites.get(node)
        if (not isinstance(payload, bytes) or (bound is not None and bound != site)
                or (bound is None and site in self.sites.values())
                or not self.answers.authentic(site, kind_of(stage), self.server_round, figures,
                                              hashlib.sha256(payload).hexdigest())):
            self.refused.add(site)
            raise Refused(f"an answer naming {site!r} at stage {stage} is not its")
        self.sites[node] = site
        if stage == Stage.COLLECT_MASKED_VECTORS and not self._acceptable(site, payload):
            self.dropped.append(site)
            raise Refused(f"the masked vector of {site!r} is off the plan or the model")
        if stage == Stage.SETUP:
            self.setups[str(node)] = {"site": site, "payload": base64.b64encode(payload).decode(),
                                      "signature": str(metrics.get("signature", ""))}
        return payload


    def _acceptable(self, site: str, payload: bytes) -> bool:
        try:
            metrics, masked = masked_answer(payload)
        except ValueError:
            return False
        return self.answers.acceptable(self.server_round, site, metrics, masked)


class MendedSecAggPlus(SecAggPlusWorkflow):
    """Flower 1.32.1's SecAgg+ workflow, mended where a site drops out before the masked
    vectors: Flower still counts such a site as "dead" when unmasking, so the survivors are asked
    for shares of a key it never shared (a KeyError in their mod), and a dead site's pairwise
    masks are rebuilt against every neighbour, also those whose vectors are not in the sum.

    Here a site is in the round's protocol from the key sharing it completed on (one that left
    before has no masks in anyone's vector), and a site that leaves after it has its masks
    rebuilt only against the sites whose vectors were summed (the only masks in the sum).
    ``tests/federated``'s ``test_flowers_own_secagg_plus_still_needs_the_mend`` fails once
    Flower's own workflow no longer needs this.
    """

    def share_keys_stage(self, grid: Grid, context: LegacyContext, state: Any) -> bool:
        shared = super().share_keys_stage(grid, context, state)
        members = set(state.active_node_ids)
        state.sampled_node_ids = members
        state.nid_to_neighbours = {node: neighbours & members for node, neighbours
                                   in state.nid_to_neighbours.items() if node in members}
        return shared

    def collect_masked_vectors_stage(self, grid: Grid, context: LegacyContext,
                                     state: Any) -> bool:
        collected = super().collect_masked_vectors_stage(grid, context, state)
        summed = set(state.active_node_ids)
        for node in state.sampled_node_ids - summed:
            state.nid_to_neighbours[node] = (state.nid_to_neighbours[node] & summed) | {node}
        return collected


def threshold(min_sites: int, declared: int) -> int:
    """The shares that rebuild a secret: at least the federation's quorum (and 2: one site's
    masked vector unmasked alone is its update), and a strict majority of the ``declared``
    sites, so that no two disjoint groups of clinics can each rebuild one site's secrets (its
    mask seed from some, its mask key from the others): each clinic checks it
    (``worker.secure_site``)."""
    return max(2, min_sites, declared // 2 + 1)


def workflow(min_sites: int, declared: int, timeout: float) -> SecAggPlusWorkflow:
    """Flower's SecAgg+ with every site sharing with every other, and a sum unmasked only when
    at least ``threshold`` sites finished the round."""
    return MendedSecAggPlus(num_shares=1.0,
                            reconstruction_threshold=threshold(min_sites, declared),
                            clipping_range=UPDATE_RANGE, max_weight=float(WEIGHT_SCALE),
                            timeout=timeout)


class SecureServer(Server):
    """Flower's server whose every round is a SecAgg+ round (its evaluation is the plain one)."""

    def __init__(self, strategy: Any, min_sites: int, timeout: float) -> None:
        super().__init__(client_manager=NumberedClients(), strategy=strategy)
        self.answers: Answers = strategy  # told when each round begins and ends
        self.min_sites, self.timeout = min_sites, timeout

    def fit_round(self, server_round: int, timeout: float | None
                  ) -> tuple[Parameters | None, dict[str, Any], Any] | None:
        context = LegacyContext(
            Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}),
            config=ServerConfig(num_rounds=server_round), strategy=self.strategy,
            client_manager=self.client_manager())
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {WorkflowKey.CURRENT_ROUND: server_round})
        context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
            self.parameters, keep_input=True)
        clients = self.client_manager()
        assert isinstance(clients, SimpleClientManager)
        grid = SiteGrid(clients, self.answers, server_round, timeout or self.timeout)
        self.answers.on_secure_round(server_round, parameters_to_ndarrays(self.parameters), grid)
        try:
            workflow(self.min_sites, len(self.answers.weights),
                     timeout or self.timeout)(grid, context)
        finally:
            grid.close()
        self.answers.on_secure_round(server_round, [], None)  # ended (halted: no change)
        return compat.arrayrecord_to_parameters(
            context.state.array_records[MAIN_PARAMS_RECORD], keep_input=True), {}, ([], [])
