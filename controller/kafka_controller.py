"""KafkaController: the ZooKeeper-mode controller every broker runs (Kafka's KafkaController).

Every broker starts one; the one that creates the ephemeral ``/controller`` (bumping
``/controller_epoch`` in the same multi) is the active controller until its session ends.
All work is an event on the single :class:`~controller.event_manager.ControllerEventManager`
queue, processed one at a time.

Failover (``_on_controller_failover``): watch ``/brokers/ids``, ``/brokers/topics``,
``/admin/delete_topics``, ``/isr_change_notification``, ``/log_dir_event_notification``,
``/admin/preferred_replica_election``, ``/admin/reassign_partitions``; drop stale ISR-change
and log-dir notifications; load live brokers and
epochs, topics, topic IDs (missing ones are created), assignments and partition states
(with a leader hint from this broker's MetadataCache, the states of partitions whose leader
is gone first, the others once those are elected: `_read_order`);
UpdateMetadata to every live broker; start the partition and replica state machines (which
elect leaders for offline partitions, drop dead replicas from the ISRs and send LeaderAndIsr
for every partition, as one batch per broker); resume
reassignments, deletions and preferred elections; schedule the auto leader rebalance.

Resignation: on ``/controller`` deletion or change (re-election), session expiry, or a write
that fails the controller-epoch check (:class:`ControllerMovedError`). Everything in-memory
is dropped and the channel manager closed.

Collaborators it builds, each given this controller's shared state
(:class:`~controller.controller_core.ControllerCore`) and contributing its event handlers to
the dispatch table: broker startups, failures and modifications in ``self.brokers``
(:mod:`controller.broker_changes`); topic creation, partition additions and deletion
requests in ``self.topics`` (:mod:`controller.topic_changes`); the leadership requests
(ControlledShutdown, AlterPartition, ElectLeaders, auto rebalance) in ``self.leadership``
(:mod:`controller.leadership`); reassignments in ``self.reassignments``
(:mod:`controller.reassignment`); ISR change and log dir failure notifications and
LeaderAndIsr responses in ``self.notifications`` (:mod:`controller.notifications`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from controller import controller_events as ev
from controller import zk_data as zd
from controller.broker_changes import BrokerChanges
from controller.channel_manager import ControllerChannelManager
from controller.context import TopicPartition
from controller.controller_core import (
    ELECTION_PART,
    ControllerConfig,
    ControllerCore,
    NodeChangeWatch,
)
from controller.event_manager import ControllerEvent, ControllerEventManager
from controller.kafka_zk_client import ControllerMovedError, KafkaZkClient, lost_controllership
from controller.leadership import LeadershipRequests
from controller.notifications import BrokerNotifications
from controller.partition_state_machine import PartitionStateMachine
from controller.reassignment import PartitionReassignments
from controller.replica_state_machine import ReplicaStateMachine
from controller.request_batch import ControllerBrokerRequestBatch
from controller.topic_changes import TopicChanges
from controller.topic_deletion import TopicDeletionManager
from controller.zk_client import StateChangeHandler

__all__ = ["KafkaController"]

log = logging.getLogger(__name__)


class _SessionHandler(StateChangeHandler):
    name = "controller"

    def __init__(self, controller: KafkaController) -> None:
        self.c = controller

    def before_initializing_session(self) -> None:
        self.c.event_manager.clear_and_put(ev.Expire())

    def after_initializing_session(self) -> None:
        self.c.event_manager.put(ev.RegisterBrokerAndReelect())


class KafkaController(ControllerCore):
    """``register_broker`` re-registers this broker (returns the new broker epoch) on a new
    ZooKeeper session; ``on_broker_epoch(epoch)`` tells the broker its new epoch."""

    def __init__(self, config: ControllerConfig, zk: KafkaZkClient, broker_info: zd.BrokerInfo,
                 broker_epoch: int,
                 unclean_enabled: Callable[[str], Awaitable[bool]] | None = None,
                 on_broker_epoch: Callable[[int], None] | None = None,
                 opener=None,
                 leader_hint: Callable[[str], Mapping[int, int] | None] | None = None
                 ) -> None:
        super().__init__(config, zk)
        self.opener = opener
        self.leader_hint = leader_hint
        self.broker_info = broker_info
        self.broker_epoch = broker_epoch
        self.on_broker_epoch = on_broker_epoch
        self.event_manager = ControllerEventManager(self.broker_id, self.process)
        self.reassignments = PartitionReassignments(self)
        self.leadership = LeadershipRequests(self, self.reassignments)
        self.brokers = BrokerChanges(self, self.reassignments)
        self.topics = TopicChanges(self)
        self.notifications = BrokerNotifications(self, self.reassignments,
                                                 self.brokers.on_replicas_become_offline)
        self.batch = ControllerBrokerRequestBatch(
            self.broker_id, self.context, config.inter_broker_listener_name, self._send,
            on_leader_and_isr_response=self.notifications.on_leader_and_isr_response,
            on_stop_replica_response=self._stop_replica_response)
        self.partition_sm = PartitionStateMachine(self.broker_id, self.context, zk, self.batch,
                                                  unclean_enabled or self._default_unclean)
        self.replica_sm = ReplicaStateMachine(self.broker_id, self.context, zk, self.batch)
        self.deletion = TopicDeletionManager(
            self.context, zk, self.replica_sm, self.partition_sm, config.delete_topic_enable,
            self._send_metadata_update_for, self.topics.mute_partition_modifications)
        self.failovers = 0
        self._read_first: list[TopicPartition] = []  # states read before the elections
        self._controller_znode_stale = False  # /controller names us from another session
        self._stale_controller_logged = 0  # the stale session last logged
        put = self.event_manager.put
        self._controller_handler = NodeChangeWatch(
            zd.ControllerZNode.path,
            on_create=lambda: put(ev.ControllerChange()),
            on_delete=lambda: put(ev.Reelect()),
            on_change=lambda: put(ev.ControllerChange()))
        self._dispatch = {
            ev.Startup: self._process_startup,
            ev.ControllerChange: self._process_controller_change,
            ev.Reelect: self._process_reelect,
            ev.RegisterBrokerAndReelect: self._process_register_broker_and_reelect,
            ev.Expire: self._process_expire,
            ev.TopicDeletionStopReplicaResponseReceived: self._process_stop_replica_response,
            **self.brokers.handlers(),
            **self.topics.handlers(),
            **self.leadership.handlers(),
            **self.reassignments.handlers(),
            **self.notifications.handlers(),
        }

    # ------------------------------------------------------------------ public

    async def startup(self) -> None:
        """Register the session handler and the /controller watch; try to become controller
        (asynchronously, on the event queue)."""
        self.zk.zk.register_state_handler(_SessionHandler(self))
        self.event_manager.put(ev.Startup())
        self.event_manager.start()

    async def shutdown(self) -> None:
        await self.event_manager.close()
        await self._on_controller_resignation()
        self.zk.zk.unregister_state_handler(_SessionHandler.name)

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return self.deletion.is_topic_queued_up_for_deletion(topic)

    # ------------------------------------------------------------------ event dispatch

    async def process(self, event: ControllerEvent) -> None:
        handler = self._dispatch.get(type(event))
        if handler is None:
            log.error("unknown controller event %r", event)
            return
        try:
            await handler(event)
        except ControllerMovedError:
            log.info("Controller moved to another broker when processing %r.", event)
            if hasattr(event, "future"):
                event.preempt()
            await self._maybe_resign()
        except Exception as e:
            if lost_controllership(e):  # the session ended: Expire resigns
                log.info("ZooKeeper session ended while processing %r.", event)
                if hasattr(event, "future"):
                    event.preempt()
                return
            log.exception("Error processing event %r", event)
            if hasattr(event, "future") and not event.future.done():
                event.preempt()

    # ------------------------------------------------------------------ election

    async def _process_startup(self, _e) -> None:
        await self.zk.zk.register_znode_change_handler_and_check_existence(
            self._controller_handler)
        await self._elect()

    async def _read_controller_id(self) -> int:
        """The broker ``/controller`` names, or -1: absent, or naming this broker from an
        earlier ZooKeeper session (a crash and a quick restart). That controller is gone;
        its znode goes when the old session expires, and the deletion watch (Reelect) runs
        the election again, so no broker acts on a controllership nobody holds."""
        got = await self.zk.get_controller()
        self._controller_znode_stale = False
        if got is None:
            return -1
        cid, owner = got
        if cid == self.broker_id and owner != self.zk.zk.session_id:
            self._controller_znode_stale = True
            if owner != self._stale_controller_logged:
                self._stale_controller_logged = owner
                log.info("%s names this broker from an earlier ZooKeeper session 0x%x; "
                         "waiting for that session to expire", zd.ControllerZNode.path, owner)
            return -1
        return cid

    async def _elect(self) -> None:
        self.active_controller_id = await self._read_controller_id()
        if self._controller_znode_stale:
            return  # its deletion (the old session expiring) triggers Reelect
        if self.active_controller_id != -1:
            log.debug("Broker %d has been elected as the controller, so stopping the election "
                      "process.", self.active_controller_id)
            return
        try:
            epoch, version = await self.zk.register_controller_and_increment_controller_epoch(
                self.broker_id)
        except ControllerMovedError:
            await self._maybe_resign()
            if self.active_controller_id != -1:
                log.debug("Broker %d was elected as controller instead of broker %d",
                          self.active_controller_id, self.broker_id)
            else:
                log.warning("A controller has been elected but just resigned, this will result "
                            "in another round of election")
            return
        self.context.epoch, self.context.epoch_zk_version = epoch, version
        self.active_controller_id = self.broker_id
        log.info("%d successfully elected as the controller. Epoch incremented to %d and epoch "
                 "zk version is now %d", self.broker_id, epoch, version)
        try:
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("Error while electing or becoming controller on broker %d. Trigger "
                          "controller movement immediately", self.broker_id)
            await self._trigger_controller_move()

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        await self.zk.zk.register_znode_change_handler_and_check_existence(
            self._controller_handler)
        self.active_controller_id = await self._read_controller_id()
        if was_active and not self.is_active:
            await self._on_controller_resignation()

    async def _trigger_controller_move(self) -> None:
        self.active_controller_id = await self._read_controller_id()
        if not self.is_active:
            log.warning("Controller has already moved when trying to trigger controller "
                        "movement")
            return
        ezv = self.context.epoch_zk_version
        self.active_controller_id = -1
        await self._on_controller_resignation()
        try:
            await self.zk.delete_controller(ezv)
        except ControllerMovedError:
            log.warning("Controller has already moved when trying to trigger controller "
                        "movement")

    async def _process_controller_change(self, _e) -> None:
        await self._maybe_resign()

    async def _process_reelect(self, _e) -> None:
        await self._maybe_resign()
        await self._elect()

    async def _process_register_broker_and_reelect(self, _e) -> None:
        self.broker_info = replace(self.broker_info, timestamp_ms=self.zk.clock_ms())
        self.broker_epoch = await self.zk.register_broker(self.broker_info)
        if self.on_broker_epoch is not None:
            self.on_broker_epoch(self.broker_epoch)
        await self._process_reelect(_e)

    async def _process_expire(self, _e) -> None:
        self.active_controller_id = -1
        await self._on_controller_resignation()

    # ------------------------------------------------------------------ failover

    async def _on_controller_failover(self) -> None:
        zkc = self.zk.zk
        self.failovers += 1
        for h in (self.brokers.watch, *self.topics.watches):
            zkc.register_znode_child_change_handler(h)
        self.notifications.register_watches()
        for h in (self.leadership.preferred_watch, self.reassignments.watch):
            await zkc.register_znode_change_handler_and_check_existence(h)
        await self.notifications.delete_stale_notifications()
        unread = await self._initialize_controller_context()
        to_delete, ineligible = await self._fetch_topic_deletions_in_progress()
        await self.deletion.init(to_delete, ineligible)
        self.send_update_metadata_request(sorted(self.context.live_or_shutting_down_broker_ids))
        await self._start_state_machines(unread)
        log.info("Ready to serve as the new controller with epoch %d", self.context.epoch)
        await self.reassignments.initialize()
        await self.deletion.try_topic_deletion()
        pending = await self.leadership.fetch_pending_preferred_replica_elections()
        await self.leadership.on_replica_election(pending, 0, ev.ZK_TRIGGERED)
        if self.config.auto_leader_rebalance_enable:
            self.leadership.schedule_auto_rebalance(self.config.first_rebalance_delay_s)

    async def _start_state_machines(self, unread: list[TopicPartition] = ()) -> None:
        """The state machines' startup on failover, in two waves of requests.

        Partitions first, as a broker failure does (Kafka's failover starts the replica
        state machine first): the elections already drop dead replicas from the ISRs, so
        the partitions a dead broker led are written once, not twice (33,000 fewer
        ZooKeeper writes at 100,000 partitions RF 3 when the old controller's broker is
        gone). The elections' LeaderAndIsr / UpdateMetadata go out first, in parts of
        `ELECTION_PART` partitions as ZooKeeper commits them, so the partitions without a
        leader are led again before the (larger) second wave is worked out (after the
        brokers answered the first, for a few seconds at most: `wait_requests_answered`):
        every replica Online, dead ones out of the ISRs, one LeaderAndIsr and one
        UpdateMetadata per broker; it leaves out the partitions the first wave just sent.

        ``unread``: the partitions whose states `_initialize_controller_context` left for
        later. The first wave elects among the others (those most likely leaderless) while
        these are read; then they go through the partition state machine as well (electing
        any that turn out leaderless), before the second wave, which needs every state."""
        async with self.coalesced_requests(flush_every=ELECTION_PART):
            elected = await self.partition_sm.startup(self._read_first if unread else None)
        if unread:
            self.context.leadership.update(await self.zk.get_partition_states(unread))
            async with self.coalesced_requests(flush_every=ELECTION_PART):
                elected |= await self.partition_sm.startup(unread)
        self._read_first = []
        if elected:
            await self.wait_requests_answered()
        with self.replica_sm.already_sent(elected):
            async with self.coalesced_requests():
                await self.replica_sm.startup()

    async def _initialize_controller_context(self) -> list[TopicPartition]:
        """Kafka's initializeControllerContext: live brokers and epochs, topics, topic IDs,
        assignments and partition states, except that the partition states are read in two
        steps when a leader hint is at hand (see `_read_order`): returns the partitions
        whose states are still to be read (empty: all were read)."""
        ctx = self.context
        zkc = self.zk.zk
        brokers = await self.zk.get_all_brokers_and_epochs()
        ctx.add_live_brokers(brokers)
        log.info("Initialized broker epochs cache: %s", dict(ctx.live_broker_epochs))
        ctx.shutting_down_broker_ids.clear()
        # the channel first: its connections open while the topics and partition states
        # are read (at 100,000 partitions a second or more), not when the first requests
        # are ready and the loop is busy with the elections
        self.channel = ControllerChannelManager(
            self.broker_id, lambda: self.context.epoch, self.config.inter_broker_listener_name,
            self.config.controller_socket_timeout_ms, self.opener)
        self.channel.startup(ctx.live_or_shutting_down_brokers())
        ctx.all_topics = await self.zk.get_all_topics()
        self.topics.register_partition_modifications_handlers(ctx.all_topics)
        assignments = await self.zk.get_topic_assignments(ctx.all_topics)
        await self.topics.process_topic_ids(assignments)
        for topic, a in assignments.items():
            ctx.assignments.setdefault(topic, {}).update(a.partitions)
            ctx.partitions_being_reassigned.update(
                (topic, p) for p, ra in a.partitions.items()
                if ra.adding_replicas or ra.removing_replicas)  # is_being_reassigned
        ctx.leadership.clear()
        await self.brokers.register_broker_modifications_handlers(ctx.live_brokers)
        self._read_first, unread = self._read_order()
        ctx.leadership.update(await self.zk.get_partition_states(self._read_first))
        log.info("Currently active brokers in the cluster: %s", sorted(ctx.live_broker_ids))
        log.info("Current list of topics in the cluster: %s", sorted(ctx.all_topics))
        del zkc
        return unread

    def _read_order(self) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """``(first, later)``: the partitions whose states are read before the elections,
        and those read after the first wave of them (empty when all go first).

        First go the partitions whose last known leader, in this broker's MetadataCache
        (``leader_hint(topic) -> {partition: leader}``, from the last controller's
        UpdateMetadata), is not a live broker or is not known: after a controller broker's
        SIGKILL at 100,000 partitions RF 3, 33,000 of them, read in a third of the time of
        all of them (ZooKeeper-bound, 0.5-0.8 s). The hint only orders the reads: every
        state comes from ZooKeeper, and the partitions read later go through the partition
        state machine as well. Without a hint, or when most partitions would go first, all
        are read first, as Kafka does."""
        ctx = self.context
        everything = ctx.all_partitions()
        if self.leader_hint is None:
            return everything, []
        live = ctx.live_broker_ids
        first, later = [], []
        try:
            for topic, partitions in ctx.assignments.items():
                leaders = self.leader_hint(topic) or {}
                for p in partitions:
                    (later if leaders.get(p, -1) in live else first).append((topic, p))
        except Exception:  # noqa: BLE001 - a hint is optional; read everything first
            log.exception("Leader hint failed; reading every partition state first")
            return everything, []
        if len(first) * 2 > len(everything):
            return everything, []
        log.info("Reading the states of %d partitions without a live leader in this broker's "
                 "metadata first, %d after their elections", len(first), len(later))
        return first, later

    async def _fetch_topic_deletions_in_progress(self) -> tuple[set[str], set[str]]:
        ctx = self.context
        to_delete = set(await self.zk.get_topic_deletions())
        offline = {t for t in ctx.all_topics
                   if any(not ctx.is_replica_online(r, tp) for tp, r in ctx.replicas_for_topic(t))}
        reassigning = {tp[0] for tp in ctx.partitions_being_reassigned}
        log.info("List of topics to be deleted: %s", ",".join(sorted(to_delete)))
        return to_delete, offline | reassigning

    async def _on_controller_resignation(self) -> None:
        zkc = self.zk.zk
        for path in (zd.TopicsZNode.path, zd.DeleteTopicsZNode.path, zd.BrokerIdsZNode.path):
            zkc.unregister_znode_child_change_handler(path)
        self.notifications.unregister_watches()
        for path in (zd.ReassignPartitionsZNode.path, zd.PreferredReplicaElectionZNode.path):
            zkc.unregister_znode_change_handler(path)
        self.brokers.unregister_all()
        self.topics.unregister_all()
        self.leadership.cancel_auto_rebalance()
        if self.channel is not None:
            channel, self.channel = self.channel, None
            await channel.shutdown()
        self.batch.clear()
        self.context.reset()
        log.info("Resigned")

    # ------------------------------------------------------------------ requests to brokers

    def _send_metadata_update_for(self, partitions: list[TopicPartition]) -> None:
        self.send_update_metadata_request(sorted(self.context.live_or_shutting_down_broker_ids),
                                          partitions)

    def _stop_replica_response(self, broker_id: int, response, errors: dict) -> None:
        self.event_manager.put(ev.TopicDeletionStopReplicaResponseReceived(
            broker_id, response.error_code, errors))

    async def _process_stop_replica_response(
            self, e: ev.TopicDeletionStopReplicaResponseReceived) -> None:
        if not self.is_active:
            return
        if e.request_error:
            in_error = set(e.partition_errors)
        else:
            in_error = {tp for tp, code in e.partition_errors.items() if code}
        await self.deletion.fail_replica_deletion([(tp, e.broker_id) for tp in in_error])
        done = set(e.partition_errors) - in_error
        if done:
            await self.deletion.complete_replica_deletion([(tp, e.broker_id) for tp in done])

    async def _default_unclean(self, topic: str) -> bool:
        configs = await self.zk.get_entity_configs("topics", topic)
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"
