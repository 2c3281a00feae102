"""`python -m specdec_lib doctor`: the runner, each check, and the command line."""

from __future__ import annotations

import io
import subprocess
import sys
import types
from pathlib import Path

import pytest

from specdec_lib import __main__ as cli
from specdec_lib.teaching import doctor
from specdec_lib.teaching.doctor import CheckResult

ROOT = Path(__file__).resolve().parents[1]


def _ok(name="a"):
    return lambda: CheckResult(name, True, "fine")


def _fail(name="b"):
    return lambda: CheckResult(name, False, "broken: do X")


# --------------------------------------------------------------------------- runner


def test_runner_all_ok_exits_0_and_prints_one_line_per_check():
    out = io.StringIO()
    assert doctor.run_checks([_ok("a"), _ok("b")], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["OK", "a", "fine"]
    assert lines[1].split() == ["OK", "b", "fine"]
    assert lines[-1] == "doctor: all 2 checks OK"


def test_runner_one_failure_exits_1_and_names_it():
    out = io.StringIO()
    assert doctor.run_checks([_ok("a"), _fail("b")], out=out) == 1
    text = out.getvalue()
    assert "FAIL  b" in text and "broken: do X" in text
    assert "1 of 2 checks FAILED (b)" in text


def test_runner_turns_a_crashing_check_into_a_fail_and_runs_the_rest():
    def check_explodes():
        raise RuntimeError("boom")

    out = io.StringIO()
    assert doctor.run_checks([check_explodes, _ok("after")], out=out) == 1
    text = out.getvalue()
    assert "FAIL  explodes" in text and "RuntimeError: boom" in text
    assert "OK    after" in text


def test_default_checks_cover_everything_the_brief_names():
    checks = doctor.default_checks()
    assert checks[:6] == [doctor.check_python, doctor.check_torch, doctor.check_transformers,
                          doctor.check_course_tools, doctor.check_device, doctor.check_dtype]
    names = ("target", "draft", "draft_b", "heads", "eagle", "eagle3")  # every model in data/models/
    assert [c.__name__ for c in checks[6:]] == [f"check_model_{n}" for n in names]


def test_the_dtype_check_names_the_promise_and_refuses_a_bad_name(monkeypatch):
    monkeypatch.delenv("SPECDEC_DTYPE", raising=False)
    result = doctor.check_dtype()
    assert result.ok and result.detail.startswith("float32: greedy output token-identical")
    monkeypatch.setenv("SPECDEC_DTYPE", "bfloat16")
    assert doctor.check_dtype().detail.startswith("bfloat16: greedy output identical to the target's up to forks")
    monkeypatch.setenv("SPECDEC_DTYPE", "int8")
    result = doctor.check_dtype()
    assert not result.ok and "'int8'" in result.detail and "unset SPECDEC_DTYPE" in result.detail


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    "text, expected",
    [("5.24.0", (5, 24, 0)), ("2.13.0+cpu", (2, 13, 0)), ("5.17.0.dev0", (5, 17, 0)),
     ("6.0.0rc1", (6, 0, 0)), ("4.57", (4, 57))],
)
def test_version_tuple(text, expected):
    assert doctor.version_tuple(text) == expected


def test_python_check():
    assert doctor.check_python((3, 11, 7)).ok
    old = doctor.check_python((3, 9, 18))
    assert not old.ok
    assert "3.9.18" in old.detail and ">= 3.10" in old.detail


@pytest.mark.parametrize("version", ["5.17.0", "5.24.0", "5.24.9"])
def test_transformers_check_accepts_the_supported_range(version):
    assert doctor.check_transformers(version).ok


@pytest.mark.parametrize("version", ["4.57.1", "5.16.2", "5.25.0", "6.0.0", "6.0.0rc1"])
def test_transformers_check_rejects_other_versions_with_the_fix(version):
    result = doctor.check_transformers(version)
    assert not result.ok
    assert version in result.detail
    assert ">=5.17,<5.25" in result.detail
    assert doctor.FIX_INSTALL in result.detail and "make course" in result.detail


def test_transformers_check_reads_the_installed_version(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="4.57.1"))
    result = doctor.check_transformers()
    assert not result.ok and "4.57.1" in result.detail


def test_torch_check_on_this_machine():
    result = doctor.check_torch()
    assert result.ok, result.detail
    import torch

    assert torch.__version__ in result.detail


def test_torch_check_too_old(monkeypatch):
    fake = types.SimpleNamespace(__version__="2.1.2", version=types.SimpleNamespace(cuda=None))
    monkeypatch.setitem(sys.modules, "torch", fake)
    result = doctor.check_torch()
    assert not result.ok and "2.1.2" in result.detail and ">= 2.2" in result.detail


# --------------------------------------------------------------------------- course tools


def test_course_tools_missing_module_fails_with_the_pip_command(monkeypatch):
    real_import = doctor.importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name == "nbval":
            raise ModuleNotFoundError("No module named 'nbval'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(doctor.importlib, "import_module", fake_import)
    result = doctor.check_course_tools((("json", "course"), ("nbval", "dev")))
    assert not result.ok
    assert "nbval" in result.detail
    assert 'make course' in result.detail and '-e ".[course,dev,serve]"' in result.detail


def test_course_tools_all_present():
    result = doctor.check_course_tools((("json", "course"), ("math", "dev")))
    assert result == CheckResult("course tools", True, "json, math")


# --------------------------------------------------------------------------- device


def _fake_devices(get_device, describe_device=lambda d: f"described {d}"):
    module = types.ModuleType("specdec_lib.core.devices")
    module.get_device = get_device
    module.describe_device = describe_device
    return module


def test_device_check_uses_get_device_and_describe_device(monkeypatch):
    calls = []

    def get_device():
        calls.append("get_device")
        return "cpu"

    monkeypatch.setitem(sys.modules, "specdec_lib.core.devices", _fake_devices(get_device))
    result = doctor.check_device()
    assert result == CheckResult("device", True, "described cpu")
    assert calls == ["get_device"]


def test_device_check_reports_an_unavailable_device(monkeypatch):
    def get_device():
        raise RuntimeError("CUDA is not available on this machine")

    monkeypatch.setenv("SPECDEC_DEVICE", "cuda")
    monkeypatch.setitem(sys.modules, "specdec_lib.core.devices", _fake_devices(get_device))
    result = doctor.check_device()
    assert not result.ok
    assert "RuntimeError: CUDA is not available on this machine" in result.detail
    assert "SPECDEC_DEVICE='cuda' is set" in result.detail


def test_device_check_with_the_real_module_and_an_unavailable_device(monkeypatch):
    devices = pytest.importorskip("specdec_lib.core.devices")
    monkeypatch.setenv(devices.DEVICE_ENV_VAR, "no-such-device")
    result = doctor.check_device()
    assert not result.ok
    assert "no-such-device" in result.detail


def test_device_check_with_the_real_module(monkeypatch):
    pytest.importorskip("specdec_lib.core.devices")
    monkeypatch.delenv("SPECDEC_DEVICE", raising=False)
    result = doctor.check_device()
    assert result.ok, result.detail


# --------------------------------------------------------------------------- models


def _fake_models(load_embedded):
    module = types.ModuleType("specdec_lib.loading")
    module.load_embedded = load_embedded
    return module


def test_model_check_loads_by_name_and_counts_parameters(monkeypatch):
    import torch

    seen = []

    def load_embedded(name):
        seen.append(name)
        return torch.nn.Linear(10, 10)  # 110 parameters

    monkeypatch.setitem(sys.modules, "specdec_lib.loading", _fake_models(load_embedded))
    result = doctor.check_model("draft")
    assert seen == ["draft"]
    assert result == CheckResult("model draft", True, "loaded (0.00M parameters)")


def test_model_check_counts_parameters_of_a_model_and_tokenizer_pair(monkeypatch):
    import torch

    pair = (torch.nn.Linear(1000, 1000), object())
    monkeypatch.setitem(sys.modules, "specdec_lib.loading", _fake_models(lambda name: pair))
    assert doctor.check_model("target").detail == "loaded (1.00M parameters)"


def test_model_check_missing_models_dir_is_a_fail_line(monkeypatch):
    def load_embedded(name):
        raise FileNotFoundError(f"no embedded model at data/models/{name}")

    monkeypatch.setitem(sys.modules, "specdec_lib.loading", _fake_models(load_embedded))
    out = io.StringIO()
    code = doctor.run_checks([doctor._model_check("target")], out=out)
    assert code == 1
    line = out.getvalue().splitlines()[0]
    assert line.startswith("FAIL  model target")
    assert "FileNotFoundError: no embedded model at data/models/target" in line
    assert "python -m specdec_tools train" in line


def test_model_check_with_the_real_loader_and_an_empty_data_dir(monkeypatch, tmp_path):
    from specdec_lib.core.paths import DATA_DIR_ENV_VAR

    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))  # a data/ folder without models/
    out = io.StringIO()
    assert doctor.run_checks([doctor._model_check("target")], out=out) == 1
    line = out.getvalue().splitlines()[0]
    assert line.startswith("FAIL  model target")
    assert "NotFound" in line and "python -m specdec_tools train" in line


def test_model_check_when_the_models_module_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "specdec_lib.loading", None)  # import raises ImportError
    result = doctor.check_model("draft_b")
    assert not result.ok and result.name == "model draft_b"
    assert "Error" in result.detail


def test_the_drafters_trained_for_the_target_load_against_it():
    for name in doctor.TARGET_DRAFTERS:
        assert doctor.check_target_drafter(name) == CheckResult(f"model {name}", True, "loaded against the embedded target")


def test_a_drafter_check_fails_with_the_fix_when_its_folder_is_missing(monkeypatch, tmp_path):
    import shutil

    from specdec_lib.core.paths import DATA_DIR_ENV_VAR, REPO_DATA_DIR

    shutil.copytree(REPO_DATA_DIR / "models" / "target", tmp_path / "models" / "target")  # the target, no heads
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))
    result = doctor.check_target_drafter("heads")
    assert not result.ok and result.name == "model heads"
    assert "python -m specdec_tools train" in result.detail


# --------------------------------------------------------------------------- command line


def test_cli_dispatches_doctor(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "default_checks", lambda: [_ok("x")])
    assert cli.main(["doctor"]) == 0
    assert "OK    x" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "default_checks", lambda: [_ok("x"), _fail("y")])
    assert cli.main(["doctor"]) == 1


def test_cli_rejects_an_unknown_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["no-such-command"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_every_registered_command_has_a_main():
    import importlib

    for name, (module_name, help_) in cli.COMMANDS.items():
        assert help_, name
        assert callable(importlib.import_module(module_name).main), name


def test_python_dash_m_help_runs():
    done = subprocess.run(
        [sys.executable, "-m", "specdec_lib", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "doctor" in done.stdout


# --------------------------------------------------------------------------- a GPU torch cannot use

SMI_HEADER = "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: {} |"


def test_driver_cuda_reads_nvidia_smi_header():
    assert doctor.driver_cuda(SMI_HEADER.format("12.2")) == (12, 2)
    assert doctor.driver_cuda("no header here") is None and doctor.driver_cuda(None) is None


def test_a_driver_older_than_the_torch_build_is_named_with_both_versions_and_the_fixes():
    problem = doctor.gpu_left_unused("cpu (2 threads)", "12.8", SMI_HEADER.format("12.2"))
    assert "CUDA 12.8" in problem and "only up to 12.2" in problem
    assert "update the NVIDIA driver" in problem and "SPECDEC_TORCH_INDEX" in problem and "SPECDEC_DEVICE=cpu" in problem


def test_no_complaint_without_a_gpu_with_a_cpu_build_or_on_the_gpu():
    assert doctor.gpu_left_unused("cpu (2 threads)", "12.8", None) is None  # no nvidia-smi: nothing to use
    assert doctor.gpu_left_unused("cpu (2 threads)", None, SMI_HEADER.format("12.2")) is None  # a CPU build, chosen
    assert doctor.gpu_left_unused("cuda:0 (NVIDIA H100)", "12.8", SMI_HEADER.format("12.9")) is None


def test_device_check_fails_when_torch_leaves_the_gpu_unused_unless_the_cpu_is_asked_for(monkeypatch):
    import torch

    monkeypatch.delenv("SPECDEC_DEVICE", raising=False)
    monkeypatch.setattr(doctor, "nvidia_smi", lambda: SMI_HEADER.format("11.4"))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = doctor.check_device()
    assert not result.ok and "only up to 11.4" in result.detail
    monkeypatch.setenv("SPECDEC_DEVICE", "cpu")
    assert doctor.check_device().ok
