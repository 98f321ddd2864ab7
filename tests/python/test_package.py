"""The installed package: its files, its native library, and the C API through ctypes."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import sublinear
from sublinear import _native

from conftest import REPO

C_API = (
    "sublinear_alloc", "sublinear_free", "sublinear_record_stream", "sublinear_empty_cache",
    "sublinear_get_stats", "sublinear_reset_peaks", "sublinear_mark_iteration",
    "sublinear_last_error", "sublinear_status", "sublinear_write_report",
    "sublinear_version", "sublinear_check_setting", "sublinear_setting_info",
)


def console_script():
    """The `sublinear` command `pip install .` put beside this Python."""
    return Path(sys.executable).parent / "sublinear"


def project_version():
    """project(sublinear VERSION ...) in CMakeLists.txt: the one place the version is written."""
    text = (REPO / "CMakeLists.txt").read_text()
    return re.search(r"project\(sublinear VERSION ([0-9.]+)", text).group(1)


def test_the_package_library_and_metadata_have_the_projects_version():
    version = project_version()
    assert sublinear.__version__ == version
    assert metadata.version("sublinear") == version
    assert _native.function("sublinear_version")().decode() == version


def test_pip_install_puts_a_sublinear_command_on_path_that_prints_the_version():
    script = console_script()
    assert script.is_file(), f"no console script at {script}"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sublinear {project_version()}\n"


def test_the_console_script_runs_the_command_line():
    from sublinear.__main__ import cli_path

    if cli_path() is None:
        pytest.skip("the package was built with SUBLINEAR_PYTHON_CLI=OFF and no sublinear is on PATH")
    done = subprocess.run([str(console_script()), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: sublinear <command>" in done.stdout


def test_the_command_line_is_never_the_console_script_itself(monkeypatch, tmp_path):
    # With no program in the package, a `sublinear` on PATH that is the console script (a
    # Python script) must not be taken for the program: it would start itself forever.
    from sublinear import __main__ as entry

    monkeypatch.setattr(entry, "__file__", str(tmp_path / "__main__.py"))
    monkeypatch.setenv("PATH", str(console_script().parent))
    assert entry.cli_path() is None
    assert entry.main(["--version"]) == 0


def test_the_wheel_ships_the_license():
    files = metadata.files("sublinear") or []
    licenses = [f for f in files if f.name == "LICENSE"]
    assert licenses, "LICENSE is not in the installed distribution"
    assert "Apache License" in licenses[0].read_text()


def test_library_path_names_the_shared_library_inside_the_package():
    path = Path(sublinear.library_path())
    assert path.is_absolute()
    assert path.name == "libsublinear.so"
    assert path.is_file()
    assert Path(sublinear.__file__).resolve().parent in path.parents


def test_library_exports_every_function_the_package_calls():
    lib = ctypes.CDLL(sublinear.library_path())
    missing = [name for name in C_API if not hasattr(lib, name)]
    assert missing == []


def test_package_opens_the_same_library_instance_as_a_second_dlopen():
    # PyTorch's CUDAPluggableAllocator opens the library by path with ctypes; stats() must
    # read that same instance, so both handles must be one.
    ours = _native.load()
    theirs = ctypes.CDLL(sublinear.library_path())
    assert ctypes.cast(ours.sublinear_get_stats, ctypes.c_void_p).value == \
        ctypes.cast(theirs.sublinear_get_stats, ctypes.c_void_p).value


def test_missing_library_error_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "package_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=r"libsublinear\.so.*pip install \."):
        sublinear.library_path()


def test_missing_c_function_is_named_in_the_error(monkeypatch):
    monkeypatch.setitem(_native._SIGNATURES, "sublinear_no_such_function", (None, []))
    with pytest.raises(RuntimeError, match="has no function sublinear_no_such_function"):
        _native.function("sublinear_no_such_function")


def test_stats_without_an_allocator_raises_with_the_library_reason():
    # No CUDA driver here and nothing installed an allocator: the C API says so.
    with pytest.raises(RuntimeError, match="no allocator"):
        sublinear.stats()


def test_stats_struct_matches_the_c_header():
    header = (Path(sublinear.__file__).resolve().parent / "include" / "sublinear" / "sublinear.h").read_text()
    body = header[header.index("typedef struct sublinear_stats {"):header.index("} sublinear_stats;")]
    names = []
    for line in body.splitlines()[1:]:
        declaration = line.split("/*")[0].strip()
        if declaration.startswith("uint64_t"):
            names += [n.strip() for n in declaration[len("uint64_t"):].rstrip(";").split(",")]
    assert [name for name, _ in _native.sublinear_stats._fields_] == names


def has_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.fixture
def no_driver():
    if has_cuda_driver():
        pytest.skip("this machine has a CUDA driver; the test is about the message without one")


def test_status_says_sublinear_is_inactive_for_want_of_a_driver(no_driver):
    line = sublinear.status()
    assert line.startswith("inactive: ")
    assert "driver" in line


def test_write_report_without_a_driver_raises_with_the_reason(no_driver, tmp_path):
    target = tmp_path / "report.json"
    with pytest.raises(RuntimeError, match="driver"):
        sublinear.write_report(target)
    assert not target.exists()


def test_preload_library_ships_with_its_entry_points():
    try:
        path = sublinear.preload_library_path()
    except FileNotFoundError:
        pytest.skip("this source tree has no preload library (integrations/preload)")
    lib = ctypes.CDLL(path)
    for name in ("cudaMalloc", "cudaFree", "InitializeInjection"):
        assert hasattr(lib, name), name


def test_package_ships_the_headers_for_libtorch_programs():
    include = Path(sublinear.__file__).resolve().parent / "include" / "sublinear"
    assert (include / "sublinear.h").is_file()
    assert (include / "torch.hpp").is_file()


def test_python_m_sublinear_runs_the_command_line():
    from sublinear.__main__ import cli_path

    if cli_path() is None:
        pytest.skip("the package was built with SUBLINEAR_PYTHON_CLI=OFF and no sublinear is on PATH")
    done = subprocess.run([sys.executable, "-m", "sublinear", "--help"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    assert "usage: sublinear" in done.stdout + done.stderr


def test_sublinear_run_from_the_package_preloads_the_package_library(clean_settings):
    clean_settings.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING", raising=False)
    bundled = Path(sublinear.__file__).resolve().parent / "bin" / "sublinear"
    if not bundled.is_file():
        pytest.skip("the package was built with SUBLINEAR_PYTHON_CLI=OFF")
    try:
        preload = sublinear.preload_library_path()
    except FileNotFoundError:
        pytest.skip("this source tree has no preload library (integrations/preload)")
    done = subprocess.run([sys.executable, "-m", "sublinear", "run", "--budget", "8GiB", "--print-env", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "SUBLINEAR_BUDGET=8GiB" in lines
    assert f"LD_PRELOAD={preload}" in lines
    assert f"CUDA_INJECTION64_PATH={preload}" in lines
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in lines


def test_under_sublinear_run_the_package_talks_to_the_preloaded_runtime(clean_settings):
    # A child started with the preload library: the package must use the preloaded copy of
    # the C API (the runtime the program's cudaMalloc reaches), never load libsublinear.so.
    code = (
        "import sublinear\n"
        "from sublinear import _native\n"
        "print(_native.preloaded())\n"
        "print(sublinear.status())\n"
        "sublinear.mark_iteration()\n"
        "from sublinear import _settings\n"
        "_settings.check('SUBLINEAR_BUDGET', '8GiB')\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('libsublinear.so' in maps, 'libsublinear_preload.so' in maps)\n"
    )
    env = dict(os.environ, LD_PRELOAD=sublinear.preload_library_path())
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "True"
    assert "inactive" in lines[1]
    assert lines[2] == "False True"
