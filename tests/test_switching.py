"""Switching as an adapter capability (frameworks/contract.py, frameworks/switching.py), with a
stand-in switcher: pools that fetch a list's items by index ahead of the loop. A switch at any
batch keeps the epoch's order (what the old pool took and never delivered is fetched again,
delivered once), a killed pool hands its batches back, the dataset's own error is raised from
the script's own config, and the controller asks every framework's switcher alike."""
import json
import random

import pytest

from feedprof.frameworks.contract import Plan, SwitchAllowed
from feedprof.frameworks.switching import PoolKilled, SwitchingLoader
from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import SwitchAt
from feedprof.trial.controller import Controller
from feedprof.trial.protocol import Mode, TrialSpec
from tests.fakes import FakeClock

ITEMS = [f"batch-{i}" for i in range(40)]


class StandInPool:
    """A config's pool: takes ``ahead`` indices from the feed before it is asked, delivers in order."""

    def __init__(self, config, feed, fetched, broken=None):
        self.config, self.feed, self.fetched, self.broken = dict(config), feed, fetched, broken
        self.ahead = []
        self._top_up()

    def _top_up(self):
        while len(self.ahead) < self.config["workers"]:
            try:
                index = self.feed.take()
            except StopIteration:
                return
            self.fetched.append(index)
            self.ahead.append(index)

    def next_batch(self, hang_after_s, now):
        if not self.ahead:
            raise StopIteration
        if self.broken is not None:
            self.broken(self)
        batch = ITEMS[self.ahead[0]]
        self.ahead.pop(0)
        self._top_up()
        return batch

    def undelivered(self, again=0):
        return list(self.ahead)

    def close(self):
        self.ahead = []

    def worker_pids(self):
        return []

    def worker_signals(self):
        return []


class Tuning:
    """What trial/online_child.OnlineTuning is to a loader: the config for each batch, told the rest."""

    def __init__(self, schedule):
        self.schedule, self.delivered_n, self.events = schedule, 0, []
        self.now = FakeClock(0.0).now_s

    def register(self, ol):
        self.registered = ol

    def config_for(self, ol):
        return self.schedule(self.delivered_n)

    def hang_limit_s(self, ol, config):
        return None

    def safe_config(self, ol, failed):
        return ol.script_config

    def switched(self, ol, config, restart=False):
        self.events.append(("switched", config["workers"], restart))

    def delivered(self, ol, t_req, t_got, batch, cpu_s=0.0):
        self.delivered_n += 1

    def failed(self, ol, config, kind, exc, signals=()):
        self.events.append(("failed", config["workers"], kind))

    def epoch_ended(self, ol):
        self.events.append(("epoch_ended",))


def loader(schedule, broken=None):
    fetched = []
    tuning = Tuning(schedule)
    ol = SwitchingLoader(lambda config, feed: StandInPool(config, feed, fetched, broken(config) if broken else None),
                         tuning, loader_id=0, script_config={"workers": 1}, chain=("train.py:9",), length=len(ITEMS))
    return ol, tuning, fetched


def one_epoch(ol, order):
    ol.start_epoch(iter(order))
    out = []
    while True:
        try:
            out.append(ol.next_batch())
        except StopIteration:
            break
    ol.end_epoch()
    return out


def test_a_switch_at_any_batch_keeps_the_epochs_order():
    order = random.Random(3).sample(range(len(ITEMS)), len(ITEMS))
    schedule = lambda n: {"workers": 1 if n < 5 else 8 if n < 17 else 3}  # noqa: E731
    ol, tuning, fetched = loader(schedule)
    got = one_epoch(ol, order)
    assert got == [ITEMS[i] for i in order]  # every batch once, in the order drawn
    assert [e[1] for e in tuning.events if e[0] == "switched"] == [1, 8, 3]
    assert len(fetched) > len(order)  # what the 8-worker pool held was fetched again by the next ...
    assert sorted(set(fetched)) == sorted(order)  # ... and nothing else
    assert tuning.events[-1] == ("epoch_ended",)


def test_a_loader_no_longer_tuned_gives_its_pool_up_and_its_epoch_goes_on_in_order():
    """Another loader became the tuned one mid-epoch (OnlineTuning.consider): this one's pool ends,
    what it fetched but did not deliver is handed back, and the epoch goes on with a new pool."""
    ol, tuning, fetched = loader(lambda n: {"workers": 8})
    assert tuning.registered is ol  # the run's end closes its pools, also mid-epoch
    order = random.Random(5).sample(range(len(ITEMS)), len(ITEMS))
    ol.start_epoch(iter(order))
    got = [ol.next_batch() for _ in range(3)]
    ol.release()
    assert ol.pool is None
    while True:
        try:
            got.append(ol.next_batch())
        except StopIteration:
            break
    assert got == [ITEMS[i] for i in order]


def test_a_new_epoch_starts_fresh_workers_of_the_config_in_force():
    ol, tuning, _ = loader(lambda n: {"workers": 4})
    one_epoch(ol, range(10))
    one_epoch(ol, range(10))
    assert [e for e in tuning.events if e[0] == "switched"] == [("switched", 4, False), ("switched", 4, True)]


def test_a_killed_pool_hands_its_batches_back_and_the_epoch_goes_on():
    def broken(config):
        def kill(pool):
            if config["workers"] == 8 and len(pool.fetched) > 12:
                raise PoolKilled([9])
        return kill

    order = list(range(len(ITEMS)))
    ol, tuning, _ = loader(lambda n: {"workers": 1 if n < 5 else 8}, broken)
    got = one_epoch(ol, order)
    assert got == ITEMS  # none lost, none repeated
    assert ("failed", 8, "killed") in tuning.events
    assert ("switched", 1, False) in tuning.events[tuning.events.index(("failed", 8, "killed")):]


def test_the_datasets_own_error_is_raised_from_the_scripts_own_config():
    def broken(config):
        def fail(pool):
            if pool.ahead[0] == 7:
                raise KeyError("corrupt record 7")
        return fail

    ol, tuning, _ = loader(lambda n: {"workers": 1 if n < 3 else 8}, broken)
    ol.start_epoch(iter(range(20)))
    got = [ol.next_batch() for _ in range(7)]
    with pytest.raises(KeyError, match="corrupt record 7"):
        ol.next_batch()  # raised again by the script's own settings, as the run as written raises it
    assert got == ITEMS[:7]
    assert ("failed", 8, "error") in tuning.events


class StandInSwitcher:
    """contract.Switcher for a made-up framework whose loaders are lists."""

    framework = "standin"

    def switch_capable(self, items, allowed):
        return None if len(items) else "empty"

    def online_loader(self, items, tuning, loader_id, script_config, chain, allowed):
        class ListLoader(SwitchingLoader):
            framework = "standin"

            def epoch(self, own=None):
                self.start_epoch(iter(range(len(items))))
                return iter(self.next_batch, object())

        fetched = []
        return ListLoader(lambda config, feed: StandInPool(config, feed, fetched), tuning, loader_id,
                          script_config, chain, len(items))


def online_controller(tmp_path, **spec):
    clock = FakeClock(0.0)
    return Controller(TrialSpec(script=str(tmp_path / "train.py"), argv=[], result_path=str(tmp_path / "r.json"),
                                events_path=str(tmp_path / "events.jsonl"), origin_s=0.0, mode=Mode.ONLINE,
                                window_batches=10 ** 9, window_seconds=0.5, min_window_batches=3, warmup_batches=0,
                                full=True, **spec), clock)


def events(tmp_path, kind):
    with open(tmp_path / "events.jsonl") as fh:
        return [e for e in map(json.loads, fh) if e["event"] == kind]


def test_the_controller_asks_each_frameworks_switcher(tmp_path, monkeypatch):
    import feedprof.frameworks as frameworks

    monkeypatch.setattr(frameworks, "switcher_for", lambda fw: StandInSwitcher() if fw == "standin" else None)
    ctl = online_controller(tmp_path)
    items = list(ITEMS[:6])

    class Items(list):  # (a weak reference to the loader is kept)
        pass

    switched, observed = Items(items), Items(items)
    plans = [Plan(framework=fw, chain=("train.py:9",), is_target=None, inject=None, replay=False)
             for fw in ("standin", "elsewhere")]
    got = [list(ctl.iterate(ctl.created(plans[0], LoaderInfo(config={"workers": 2}, script_config={"workers": 2}),
                                        switched), lambda: iter(["own"]))),
           list(ctl.iterate(ctl.created(plans[1], LoaderInfo(config={}), observed), lambda: iter(["own"])))]
    assert got == [items, ["own"]]  # served by its online loader; the other keeps its own iterator
    modes = [(e["framework"], e["mode"], e["why_not"]) for e in events(tmp_path, "online_loader")]
    assert modes == [("standin", SwitchAt.BATCH, ""), ("elsewhere", SwitchAt.NONE, "framework:elsewhere")]
    target = events(tmp_path, "online_target")[0]
    assert (target["framework"], target["switch_at"]) == ("standin", "mid_epoch")


def test_a_switchers_refusal_is_said_and_the_loader_keeps_its_iterator(tmp_path, monkeypatch):
    import feedprof.frameworks as frameworks

    monkeypatch.setattr(frameworks, "switcher_for", lambda fw: StandInSwitcher())

    class Items(list):
        pass

    ctl = online_controller(tmp_path, allow_resharding=True)
    assert ctl.switch_allowed == SwitchAllowed(resharding=True)
    plan = Plan(framework="standin", chain=("train.py:9",), is_target=None, inject=None, replay=False)
    empty = Items()
    handle = ctl.created(plan, LoaderInfo(config={}), empty)
    assert list(ctl.iterate(handle, lambda: iter(["own"]))) == ["own"]
    assert ctl.switching(handle) is None
    assert [e["why_not"] for e in events(tmp_path, "online_loader")] == ["empty"]


def test_the_online_tuning_is_told_of_a_killed_pool_of_any_framework(tmp_path):
    """trial/online_child.OnlineTuning, the real one, told that a pool of the tuned loader broke:
    its event names the loader's epoch (OnlineLoader.epoch_number), whatever the framework. It
    read torch's own counter, so a Keras pool killed while tuned raised AttributeError in the
    user's loop."""
    import json

    from feedprof.trial.online_child import OnlineTuning

    events = []
    decision = tmp_path / "decision.json"
    decision.write_text(json.dumps({"seq": 1, "config": {"workers": 8}, "final": False, "why": "climb"}))
    tuning = OnlineTuning(str(decision), lambda event, **fields: events.append((event, fields)),
                          FakeClock(0.0).now_s, 0.0, 0.5, 3)

    def kill(pool):
        if pool.config["workers"] == 8 and len(pool.fetched) > 12:
            raise PoolKilled([9])

    fetched = []
    ol = SwitchingLoader(lambda config, feed: StandInPool(config, feed, fetched, kill), tuning, loader_id=0,
                         script_config={"workers": 1}, chain=("train.py:9",), length=len(ITEMS))
    tuning.consider(ol)
    assert one_epoch(ol, list(range(len(ITEMS)))) == ITEMS
    failures = [fields for event, fields in events if event == "online_failure"]
    assert len(failures) == 1 and failures[0]["kind"] == "killed" and failures[0]["epoch"] == 1
