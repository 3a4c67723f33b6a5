"""What the charts draw, computed from stored records (no browser needed)."""
import pytest

from feedprof.store.reasons import OverMemoryBudget
from feedprof.render import plots
from feedprof.store import (GpuSeries, HostInfo, LoaderRecord, Recommendation, Run, Samples, StepLog,
                            TuneResult, Window)
from tests.records import make_trial


def run_with(samples=None, steps=None):
    rec = LoaderRecord(loader_id=0, framework="torch", batches=10, steps=steps or StepLog())
    return Run(host=HostInfo(cpus_online=4), loaders=(rec,), window=Window(loader_id=0, t_start_s=1.0, t_end_s=2.0),
               samples=samples or Samples())


def test_binned_wait_fraction():
    steps = StepLog(t_end_s=(0.1, 0.2, 0.6, 0.7), n_steps=(1, 1, 1, 1), wait_s=(0.05, 0.05, 0.0, 0.1),
                    wall_s=(0.1, 0.1, 0.1, 0.1))
    t, pct = plots.binned_wait(run_with(steps=steps), bin_s=0.5)
    assert t == (0.25, 0.75)
    assert pct == pytest.approx((50.0, 50.0))


def test_curves_are_in_cores_and_gib_with_gaps_kept():
    s = Samples(t_s=(0.0, 0.2), system_cpu_pct=(50.0, None), main_cpu_pct=(150.0, 100.0),
                workers_cpu_pct=(0.0, 200.0), main_rss_bytes=(2**30, 2**30), workers_rss_bytes=(2**30, None),
                shm_used_bytes=(0, 2**29), tree_pss_bytes=(None, 2**31),
                gpus=(GpuSeries(cuda_index=0, uuid="GPU-a", util_pct=(90.0, None)),))
    c = plots.curves_data("#0", run_with(samples=s))
    assert c.system_cores == (2.0, None)  # 50 % of 4 CPUs, and a gap
    assert c.main_cores == (1.5, 1.0) and c.workers_cores == (0.0, 2.0)
    assert c.rss_gib == (2.0, 1.0)
    assert c.pss_t_s == (0.2,) and c.pss_gib == (2.0,)
    assert c.gpu_util_pct == ((90.0, None),)  # a lost GPU stays a gap, not a zero
    assert c.window == (1.0, 2.0)


def test_throughput_chart_marks_baseline_pick_and_ceiling():
    trials = (make_trial(index=0, role="baseline", config={"num_workers": 0}, state="ok", batches_per_s=10.0,
                    batches_per_s_low=9.0, batches_per_s_high=11.0),
              make_trial(index=1, role="ceiling", config={"num_workers": 0}, state="ok", batches_per_s=100.0),
              make_trial(index=2, role="search", config={"num_workers": 4}, state="ok", batches_per_s=80.0),
              make_trial(index=3, role="search", config={"num_workers": 64}, state="rejected",
                    cause=OverMemoryBudget(need_bytes=2, free_bytes=1)))
    rec = Recommendation(framework="torch", config={"num_workers": 4}, trial_index=2, ceiling_batches_per_s=100.0,
                         baseline_batches_per_s=10.0)
    chart = plots.throughput_data(TuneResult(trials=trials, recommendation=rec))
    # each bar by its trial and its config; the ceiling is a line, not a bar
    assert [b.label for b in chart.bars] == ["#0 num_workers=0", "#2 num_workers=4", "#3 num_workers=64"]
    assert [b.picked for b in chart.bars] == [False, True, False]
    assert chart.bars[2].value is None and chart.bars[2].state == "rejected"
    assert chart.ceiling == 100.0 and chart.baseline == 10.0
    svg = plots.draw_throughput(chart)
    assert svg.startswith("<svg") and "currentColor" in svg and plots.INK not in svg


def test_svg_is_deterministic_and_themeable():
    s = Samples(t_s=(0.0, 0.2, 0.4), main_cpu_pct=(10.0, 20.0, 30.0), system_cpu_pct=(5.0, 6.0, 7.0),
                workers_cpu_pct=(0.0, 0.0, 0.0), main_rss_bytes=(1, 2, 3), workers_rss_bytes=(0, 0, 0),
                shm_used_bytes=(0, 0, 0))
    c = plots.curves_data("#0", run_with(samples=s))
    a, b = plots.draw_curves([c], gpu_note="GPU: not available"), plots.draw_curves([c], gpu_note="GPU: not available")
    assert a == b
    assert plots.GRID not in a and "stroke-opacity: 0.15" in a


def test_a_bar_label_is_its_config_a_setting_to_a_line():
    assert plots.bar_label("num_workers=8, persistent_workers=True", "#3") == "#3 num_workers=8\npersistent_workers=True"
    assert plots.bar_label("num_workers=0") == "num_workers=0"
    assert plots.bar_label("method=$x") == r"method=\$x"  # text, not mathtext


def test_an_online_run_names_its_configs_and_counts_them_as_its_chart_and_timeline_do():
    """A run whose last switch came as it ended (its switches name 3 configs, its windows 2):
    the run's section counted switches ("explored 3 config(s)") above a chart of 2 bars
    labelled #0, #1 and a timeline legend of 2. It counts what the chart draws, and the chart's
    bars are named by their configs."""
    from feedprof.render.html import render_tune
    from feedprof.render.online import online_lines, timeline_data
    from tests.records import make_online_result

    result = make_online_result({0: [12.0, 11.0], 32: [80.0, 84.0]}, switched_at_end=16)
    chart = plots.throughput_data(result)
    assert [b.label for b in chart.bars] == ["num_workers=0", "num_workers=32"]
    legend = set(timeline_data(result)[3])
    assert legend == {"num_workers=0", "num_workers=32"}
    said = online_lines(result)[0]
    assert "tried 2 config(s), the script's own settings included" in said, said
    assert "switched to 1 more that no window measured" in said
    assert len(chart.bars) == len(legend) == 2
    page = render_tune(result)
    assert "explored 3" not in page and "tried 2 config(s)" in page and ">#0<" not in page


def test_the_scripts_own_settings_measured_again_are_coloured_as_its_own():
    trials = (make_trial(index=0, role="baseline", config={"num_workers": 0}, state="ok", batches_per_s=10.0),
              make_trial(index=1, role="search", config={"num_workers": 4}, state="ok", batches_per_s=40.0),
              make_trial(index=2, role="confirm", config={"num_workers": 0}, state="ok", batches_per_s=11.0))
    chart = plots.throughput_data(TuneResult(trials=trials))
    assert [b.own for b in chart.bars] == [True, False, True]
    assert [b.role for b in chart.bars] == ["baseline", "search", "confirm"]
