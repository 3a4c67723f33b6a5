"""``feedprof.keras.ProfileCallback``: profile inside ``model.fit`` (Keras 3).

    cb = feedprof.keras.ProfileCallback()
    model.fit(dataset, epochs=3, callbacks=[cb])
    print(cb.summary()); cb.save("run.json"); cb.report("feedprof.html")
    cb.to_tensorboard("runs/fit")  # TensorBoard event files (needs pip install tensorboard)

The callback is to ``fit`` what ``feedprof.profile()`` is to a PyTorch loop:
it samples CPU, memory and GPU while training runs and times every step.
On the torch and jax backends Keras fetches each batch before
``on_train_batch_begin``, so the time from one batch's end to the next one's
begin is the data wait. On the TensorFlow backend the batch is fetched inside
the compiled train step: the steps are timed, the wait is reported as not
observable, and ``feedprof tune`` measures how input-bound the job is (from a
compute ceiling).

Keras is imported only when the callback is first used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from feedprof import defaults
from feedprof.record.clock import MONOTONIC
from feedprof.store.codes import Framework

if TYPE_CHECKING:
    from feedprof.record.steps import StepRecorder
    from feedprof.session import PrintableSummary
    from feedprof.store import Run

_CLASS = None


class _FitProfile:
    """What ProfileCallback does. Its other base, ``keras.callbacks.Callback``,
    is added by :func:`_build` when the callback is first used, so that
    importing this module does not import Keras."""

    def __init__(self, interval_s: float = defaults.INTERVAL_S, gpu: bool = True,
                 warmup_batches: int = defaults.PROFILE_WINDOW.warmup_batches):
        from feedprof.session import Profile

        super().__init__()  # keras.callbacks.Callback's
        self.profile = Profile(interval_s=interval_s, gpu=gpu, warmup_batches=warmup_batches)
        self._now = MONOTONIC.now_s
        self._rec: Optional["StepRecorder"] = None
        self._t_end = None
        self._begun = (0, 0.0, 0.0)  # (first step, wait began, step began) of the call running

    def on_train_begin(self, logs: Optional[Dict[str, float]] = None) -> None:
        import keras

        from feedprof.record.steps import LoaderInfo

        if self._rec is None:
            backend = keras.backend.backend()
            self._wait_observable = backend != "tensorflow"
            self._rec = self.profile.recorder(Framework.KERAS, name="model.fit", info=LoaderInfo(
                backend=backend, batches_per_epoch=(self.params or {}).get("steps"),
                wait_observable=self._wait_observable))

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, float]] = None) -> None:
        self._rec.epoch_started(self._now())
        self._t_end = None

    def on_train_batch_begin(self, batch: int, logs: Optional[Dict[str, float]] = None) -> None:
        t = self._now()
        # torch/jax: the batch was fetched since the last step ended (the wait)
        self._begun = (batch, self._t_end if self._wait_observable and self._t_end is not None else t, t)

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, float]] = None) -> None:
        self._t_end = self._now()
        begin_step, t_req, t_got = self._begun
        # steps_per_execution=N: one call runs steps begin_step..batch (N, fewer at an epoch's end)
        self._rec.batch(t_req, t_got, max(1, batch - begin_step + 1))

    def on_train_end(self, logs: Optional[Dict[str, float]] = None) -> None:
        self.profile.stop()

    # -- results, as on feedprof.profile() -------------------------------

    @property
    def run(self) -> "Run":
        """The Run recorded so far (as ``feedprof.profile().run``)."""
        return self.profile.run

    def summary(self) -> "PrintableSummary":
        return self.profile.summary()

    def save(self, path: str = "run.json") -> str:
        return self.profile.save(path)

    def report(self, path: str = "feedprof.html") -> str:
        return self.profile.report(path)

    def to_tensorboard(self, logdir: str) -> str:
        return self.profile.to_tensorboard(logdir)


def _build() -> type:
    try:
        import keras
    except ImportError as exc:  # pragma: no cover - only without Keras
        raise ImportError("feedprof.keras.ProfileCallback needs Keras 3 (pip install keras, "
                          "or tensorflow which includes it)") from exc

    class ProfileCallback(_FitProfile, keras.callbacks.Callback):
        pass

    return ProfileCallback


def __getattr__(name: str) -> Any:
    global _CLASS
    if name == "ProfileCallback":
        if _CLASS is None:
            _CLASS = _build()
        return _CLASS
    raise AttributeError(f"module 'feedprof.keras' has no attribute {name!r}")
