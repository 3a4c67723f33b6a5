"""What feedprof found, as records with their numbers: never as sentences.

Every layer that has something to tell the user (the sampler, the trial
child, the strategy, the recommendation) returns one of these; only
``render/words/`` turns them into words, for the terminal and the HTML page
alike. In JSON each is an object with its ``code`` and its figures, so a
reader of ``results.json`` gets the numbers without parsing prose.

A new finding is a new subclass here, its words in ``render/words/``, and
its figures in the JSON schema (``python -m feedprof.store.schema --write``).
"""
from feedprof.store.reasons.base import (
    Config, Reason, Unknown, said_once)
from feedprof.store.reasons.origin import (BuiltByHelper, ConfigOriginUnknown, HelperTakesNoSetting, PasteLineWithheld,
                                          SetByOverride)
from feedprof.store.reasons.run import (
    CudaInForkedWorker, DuplicatedPerWorker, EpochEndStall, ExitedWithCode, FewSteadyBatches, GpuIntervalBelowNvml,
    GpuUnavailable, GrowthOverMemoryBudget, Interrupted, KilledBySignal, MemoryGrows, NoBatchWithin,
    NoLoaderIterated, NodesDiffer, NoSuperInit, NotInstrumented, OnlyWarmup, OpenFilesNearLimit, OutOfMemoryKilled, OverFdLimit,
    OverMemoryBudget, OverShmBudget, PinMemoryNoEffect, QueuedForResources, QueueWaitTooLong, RankFailed, RanksLostConnection, RankSpread, RayClusterJoined,
    SamplingStopped, ScriptExited, ScriptFailed,
    SharedMemoryExhausted, Straggler, TooManyOpenFiles, TrainerSuggestedWorkers, TrialTimedOut, WaitNotObservable,
    WindowNotReached, WorkerInfoNeverAsked)
from feedprof.store.reasons.tune import (
    AppliesToEveryRank, BaselineFigures, BaselineNotMeasured, BudgetCutShort, BusyMachine, CeilingBelowLoading,
    CeilingFailed, LoopBarelyWaits,
    CheaperWithinNoise, CpusAreTheLimit, CpusSaturated, FewerWorkersDoAsWell, FlatRung, ForkServerFailed,
    JumpedAhead, KeepScriptSettings, LadderStoppedByTrial, LeadNotConfirmed, MaxWorkersReached, MeasuredAgain,
    MeasuredRepeatedly,
    MemoryGrowthProjected, NoLoaderAtSite, NothingTried, NotTheLoader, PastCpuCount, PersistentWorkersComputed,
    PickFigures,
    RayCpusReserved, ReachedCeiling, RivalsRemeasured, SetByFlag, SetElsewhere, SettingSourceUnknown, ShortOfCeiling,
    ThreadsVersusProcesses, TrainerAdviceChecked, TuneInterruptedEarly, Verdict, VersusAutotune, WorkersCapped,
    WorkersLeaveCpuIdle)
from feedprof.store.reasons.advice import InOrderGain, OrderChanges, SamplesFollowWorkers, SetInPipeline
from feedprof.store.reasons.beyond import BOUNDS, GapExplained, PartNotMeasured, Remedy
from feedprof.store.reasons.online import RandomDrawsMove, SwitchingStopped
from feedprof.store.reasons.attach import AttachAdvice, LoopStopped, NoLoaderSeen
from feedprof.store.reasons.threads import PoolsHeldOnline, PoolsOversubscribe, PoolsTried

__all__ = [
    "BOUNDS", "GapExplained", "PartNotMeasured", "Remedy", "CeilingBelowLoading", "LoopBarelyWaits", "Config", "Reason", "Unknown", "said_once", "BuiltByHelper", "ConfigOriginUnknown",
    "HelperTakesNoSetting", "PasteLineWithheld", "SetByOverride", "CudaInForkedWorker", "DuplicatedPerWorker",
    "EpochEndStall", "ExitedWithCode", "FewSteadyBatches", "GpuIntervalBelowNvml", "GpuUnavailable",
    "GrowthOverMemoryBudget", "Interrupted", "KilledBySignal", "MemoryGrows", "NoBatchWithin", "NoLoaderIterated",
    "NodesDiffer", "NoSuperInit", "NotInstrumented", "OnlyWarmup", "OpenFilesNearLimit", "OutOfMemoryKilled", "OverFdLimit",
    "OverMemoryBudget", "OverShmBudget", "PinMemoryNoEffect", "QueuedForResources", "QueueWaitTooLong", "RankFailed", "RanksLostConnection", "RankSpread", "RayClusterJoined",
    "SamplingStopped", "ScriptExited",
    "ScriptFailed", "SharedMemoryExhausted", "Straggler", "TooManyOpenFiles", "TrainerSuggestedWorkers",
    "TrialTimedOut", "WaitNotObservable", "WindowNotReached", "WorkerInfoNeverAsked", "AppliesToEveryRank",
    "BaselineFigures", "BaselineNotMeasured", "BudgetCutShort", "BusyMachine", "CeilingFailed",
    "CheaperWithinNoise", "CpusAreTheLimit", "CpusSaturated", "FewerWorkersDoAsWell", "FlatRung",
    "ForkServerFailed", "JumpedAhead", "KeepScriptSettings", "LadderStoppedByTrial", "LeadNotConfirmed",
    "MaxWorkersReached",
    "MeasuredAgain", "MeasuredRepeatedly", "MemoryGrowthProjected", "NoLoaderAtSite", "NothingTried", "NotTheLoader",
    "PastCpuCount",
    "PersistentWorkersComputed", "PickFigures", "RayCpusReserved", "ReachedCeiling", "RivalsRemeasured", "SetByFlag", "SetElsewhere",
    "SettingSourceUnknown", "ShortOfCeiling", "ThreadsVersusProcesses", "TrainerAdviceChecked",
    "TuneInterruptedEarly", "Verdict", "VersusAutotune", "WorkersCapped", "WorkersLeaveCpuIdle",
    "InOrderGain", "OrderChanges", "SamplesFollowWorkers", "SetInPipeline", "RandomDrawsMove", "SwitchingStopped",
    "AttachAdvice", "LoopStopped", "NoLoaderSeen",
    "PoolsHeldOnline", "PoolsOversubscribe", "PoolsTried",
]
