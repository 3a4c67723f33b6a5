"""Advice for settings that live in a config system (issue 23, item 2): the
override to pass, the way the system is driven, and the file and line that set
the value now. The unit tests read the scripts as the tune reads them (nothing
is run, so they need no config package); the end-to-end tests run the real
systems and skip where one is not installed."""
import json
import os

import pytest

from feedprof.frameworks.torch import paste_for
from feedprof.render.words import say
from feedprof.store import LoaderRecord
from feedprof.store.reasons import SetByOverride
from tests.conftest import run_feedprof, write_script
from tests.scripts_configs import (DATASET, HYDRA_APP, HYDRA_CONFIG, HYDRA_DATA, LIGHTNING_CLI, YACS_DEFAULTS,
                                   YACS_TRAIN, YAML_CONFIG, YAML_TRAIN)

EIGHT = {"num_workers": 8, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": False}


def line_of(text, fragment):
    return next(i for i, line in enumerate(text.lstrip().splitlines(), 1) if fragment in line)


def hydra_app(root):
    (root / "conf" / "data").mkdir(parents=True)
    write_script(root / "conf", "config.yaml", HYDRA_CONFIG)
    write_script(root / "conf" / "data", "slow.yaml", HYDRA_DATA)
    write_script(root, "data.py", DATASET)
    return write_script(root, "train.py", HYDRA_APP)


def yacs_project(root):
    (root / "config").mkdir()
    write_script(root / "config", "__init__.py", "")
    write_script(root / "config", "defaults.py", YACS_DEFAULTS)
    write_script(root, "data.py", DATASET)
    return write_script(root, "train.py", YACS_TRAIN)


def advise(script, chain, argv=(), config=EIGHT):
    loader = LoaderRecord(loader_id=0, framework="torch", call_chain=tuple(chain), config={"num_workers": 0})
    return paste_for(config, loader, script, list(argv))


def override(paste):
    return next(f for f in paste.findings if isinstance(f, SetByOverride))


def test_hydra_override_and_the_key_in_the_config_group(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = hydra_app(tmp_path)
    chain = [f"train.py:{line_of(HYDRA_APP, f)}" for f in ("    main()", "loader = build_loader", "return DataLoader")]
    paste = advise(script, chain, argv=["epochs=2", "data.num_workers=1"])
    assert paste.line == "python train.py epochs=2 data.num_workers=8"  # replaced, not repeated
    found = override(paste)
    assert (found.system, found.key, found.override) == ("hydra", "data.num_workers", "data.num_workers=8")
    assert found.declared_at == "conf/data/slow.yaml:2" and found.used_at == chain[-1]
    assert "run with `data.num_workers=8`" in say(found) and "conf/data/slow.yaml:2" in say(found)


def test_lightning_cli_flag_names_the_datamodule_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "data.py", DATASET)
    script = write_script(tmp_path, "train.py", LIGHTNING_CLI)
    chain = [f"train.py:{line_of(LIGHTNING_CLI, f)}" for f in ("    cli_main()", "LightningCLI(Model", "return DataLoader")]
    paste = advise(script, chain, argv=["fit", "--trainer.max_epochs", "2"])
    assert paste.line == "python train.py fit --trainer.max_epochs 2 --data.num_workers 8"
    found = override(paste)
    assert (found.system, found.override) == ("lightning_cli", "--data.num_workers 8")
    assert "LightningCLI" in say(found)
    # subclass mode: the class's arguments are under init_args
    subclass = LIGHTNING_CLI.replace("LightningCLI(Model, SlowData)", "LightningCLI(Model, SlowData, subclass_mode_data=True)")
    script = write_script(tmp_path, "train.py", subclass)
    assert advise(script, chain, argv=["fit"]).line == "python train.py fit --data.init_args.num_workers 8"


def test_a_subclass_of_lightning_cli_is_lightning_cli(tmp_path, monkeypatch):
    """Lightning's docs teach ``class MyLightningCLI(LightningCLI)`` (add_arguments_to_parser,
    link_arguments), as its computer_vision_fine_tuning example does: the flag is the same."""
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "data.py", DATASET)
    subclassed = LIGHTNING_CLI.replace("def cli_main():\n    LightningCLI(Model, SlowData)", (
        "class MyLightningCLI(LightningCLI):\n    def add_arguments_to_parser(self, parser):\n        pass\n\n\n"
        "class TheirCLI(MyLightningCLI):\n    pass\n\n\n"
        "def cli_main():\n    TheirCLI(Model, SlowData)"))
    assert "TheirCLI(Model" in subclassed
    script = write_script(tmp_path, "train.py", subclassed)
    chain = [f"train.py:{line_of(subclassed, f)}" for f in ("    cli_main()", "TheirCLI(Model", "return DataLoader")]
    assert advise(script, chain, argv=["fit"]).line == "python train.py fit --data.num_workers 8"


def test_yacs_options_on_the_command_line_and_the_default_in_the_config_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = yacs_project(tmp_path)
    chain = [f"train.py:{line_of(YACS_TRAIN, f)}" for f in ("    main()", "loader = DataLoader")]
    paste = advise(script, chain, argv=["SOLVER.EPOCHS", "2", "DATALOADER.NUM_WORKERS", "1"])
    assert paste.line == "python train.py SOLVER.EPOCHS 2 DATALOADER.NUM_WORKERS 8"
    found = override(paste)
    assert (found.system, found.key) == ("yacs", "DATALOADER.NUM_WORKERS")
    assert found.declared_at == f"config/defaults.py:{line_of(YACS_DEFAULTS, '_C.DATALOADER.NUM_WORKERS')}"


def test_a_yaml_config_file_gets_its_line_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_script(tmp_path, "train.yaml", YAML_CONFIG)
    write_script(tmp_path, "data.py", DATASET)
    script = write_script(tmp_path, "train.py", YAML_TRAIN)
    paste = advise(script, [f"train.py:{line_of(YAML_TRAIN, 'loader = DataLoader')}"])
    assert paste.line == f"workers: 8  # train.yaml:{line_of(YAML_CONFIG, 'workers:')}"
    assert override(paste).system == "yaml_file"


def test_a_config_whose_origin_is_unknown_is_said_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("import json\nfrom torch.utils.data import DataLoader\ncfg = json.load(open('c.json'))\n"
            "loader = DataLoader(range(8), num_workers=cfg['workers'])\n")
    script = write_script(tmp_path, "train.py", text)
    paste = advise(script, ["train.py:4"])
    assert paste.line.startswith("loader = DataLoader(range(8), num_workers=8)")
    assert "cannot tell where num_workers gets its value (cfg['workers']" in " ".join(say(f) for f in paste.findings)


# ------------------------------------------------ the real systems, tuned


QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
         "--interval", "0.1"]


def tune(root, *argv, budget=40):
    out = root / "out"
    proc = run_feedprof(["tune", "--out", str(out), *QUICK, "--budget", str(budget), "train.py", "--", *argv],
                        timeout=400, cwd=str(root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / "results.json").read_text())["recommendation"]


def test_hydra_app_is_tuned_with_an_override(tmp_path, no_leftovers, torch):
    pytest.importorskip("hydra", reason="hydra-core is not installed")
    hydra_app(tmp_path)
    proc, rec = tune(tmp_path, "epochs=3", "hydra.run.dir=" + str(tmp_path / "outputs"))
    n = rec["config"]["num_workers"]
    assert n >= 2 and rec["paste_line"].splitlines()[-1].endswith(f"data.num_workers={n}")
    assert f"run with `data.num_workers={n}`" in proc.stdout and "conf/data/slow.yaml:2" in proc.stdout


def test_lightning_cli_is_tuned_with_its_flag(tmp_path, no_leftovers, torch):
    pytest.importorskip("lightning", reason="lightning is not installed")
    pytest.importorskip("jsonargparse", reason="LightningCLI needs jsonargparse (lightning[pytorch-extra])")
    write_script(tmp_path, "data.py", DATASET)
    write_script(tmp_path, "train.py", LIGHTNING_CLI)
    # no logger: every run saves its config.yaml in the same directory, and LightningCLI
    # refuses to overwrite one; the trials save none (the user's next run would fail on it)
    proc, rec = tune(tmp_path, "fit", "--trainer.max_epochs", "3", "--trainer.default_root_dir", "logs",
                     "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                     "--trainer.enable_progress_bar", "false", budget=120)
    n = rec["config"]["num_workers"]
    assert n >= 2 and rec["paste_line"].splitlines()[-1].endswith(f"--data.num_workers {n}")
    assert rec["loader_site"] == f"train.py:{line_of(LIGHTNING_CLI, 'return DataLoader')}"
    assert not (tmp_path / "logs" / "config.yaml").exists()


def test_yacs_config_is_tuned_with_its_options(tmp_path, no_leftovers, torch):
    pytest.importorskip("yacs", reason="yacs is not installed")
    yacs_project(tmp_path)
    proc, rec = tune(tmp_path, "SOLVER.EPOCHS", "3")
    n = rec["config"]["num_workers"]
    assert rec["paste_line"].splitlines()[-1] == f"python train.py SOLVER.EPOCHS 3 DATALOADER.NUM_WORKERS {n}"
