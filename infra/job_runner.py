"""Entry point of every benchmark container: install what the command needs, run it.

Why: the benchmark Jobs run the project's own `benchmarks` code, mounted from a ConfigMap
as a source tree, inside a stock Python image, so no image has to be built. At start this
module installs the pinned packages that one command needs (`COMMAND_PACKAGES`: the
video maker needs no AIPerf; a no-op on an image that already has them, which is how
clusters without registry access run it; pip reads PIP_INDEX_URL and friends from the
pod's environment for a mirror), then runs `python -m benchmarks ...`, streaming its
output, and writes the cause to the termination log: the command's last line, pip's own
error, or, when the pod was stopped (SIGTERM), that it was and what to do (`--on-stop`).
When the command fails, Kubernetes puts that line in the Pod status, and `pulumi up`
reports it. (`FallbackToLogsOnError` alone would give the log's tail, not one line.)

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Iterable
from pathlib import Path

# Third-party distributions each in-cluster command needs, pinned by constraints.txt
# (measured: AIPerf's tree is about 146 packages and 1.3 GB; the others a few MB).
COMMAND_PACKAGES = {
    "videos": ("imageio-ffmpeg",),
    "smoke": ("openai", "imageio-ffmpeg"),
    "sweep": ("aiperf", "imageio-ffmpeg"),
}
CONSTRAINTS_FILE = "constraints.txt"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_LIMIT = 4096

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def normalize(name: str) -> str:
    """Distribution names compare case-, dash- and dot-insensitively (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(constraints_text: str, names: Iterable[str]) -> list[str]:
    """`name==version` for each wanted name, read from a constraints file's text."""
    found: dict[str, str] = {}
    for line in constraints_text.splitlines():
        match = _PIN.match(line)
        if match:
            found[normalize(match.group(1))] = f"{match.group(1)}=={match.group(2)}"
    missing = [name for name in names if normalize(name) not in found]
    if missing:
        raise ValueError(f"{CONSTRAINTS_FILE} pins no version of: {', '.join(missing)}")
    return [found[normalize(name)] for name in names]


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet(
    wanted: Iterable[str], version_of: Callable[[str], str | None] = installed_version
) -> list[str]:
    """The pins this interpreter does not already satisfy."""
    result = []
    for pin in wanted:
        name, version = pin.split("==", 1)
        if version_of(name) != version:
            result.append(pin)
    return result


def last_line(text: str) -> str:
    """The last non-blank line, cut to what a termination message can hold."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1].encode()[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore")


class InstallError(RuntimeError):
    """pip failed; the message is pip's own last error line."""


def prepare_python(src: Path, venv_dir: Path, packages: Iterable[str],
                   say: Callable[[str], None]) -> str:
    """An interpreter that has `packages` at their pins: this one, or a venv over it."""
    wanted = pins((src / CONSTRAINTS_FILE).read_text(), packages)
    todo = unmet(wanted)
    if not todo:
        say(f"runner: the image already has {', '.join(wanted) or 'all it needs'}")
        return sys.executable
    python = venv_dir / "bin" / "python"
    if not python.exists():
        # Over the system site-packages, so a partly prepared image is reused.
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(venv_dir)
    say(f"runner: installing {', '.join(todo)} (pinned; set the benchmark image to one that "
        "has them for clusters without registry access)")
    started = time.monotonic()
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-cache-dir", *todo, "-c", str(src / CONSTRAINTS_FILE)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    sys.stdout.write(pip.stdout)
    if pip.returncode != 0:
        # pip's first error is the cause (later ones point at its help pages).
        errors = [line for line in pip.stdout.splitlines() if line.startswith("ERROR:")]
        raise InstallError(last_line(errors[0] if errors else pip.stdout)
                           or f"pip exited with code {pip.returncode}")
    say(f"runner: installed in {time.monotonic() - started:.0f} s")
    return str(python)


class Stop:
    """Pod shutdown signals the runner (PID 1): note it and pass it on, so the command
    stops cleanly and the runner can say afterwards why it ended."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.started = time.monotonic()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signal = signal.Signals(signum).name
        if self.process is None:
            raise KeyboardInterrupt
        self.process.send_signal(signum)

    def message(self, on_stop: str) -> str:
        minutes = (time.monotonic() - self.started) / 60
        return f"runner: stopped by {self.signal} after {minutes:.0f} min: {on_stop}"


def run_streaming(command: list[str], env: dict[str, str], stop: Stop) -> tuple[int, str]:
    """Run, echoing output line by line; returns the exit code and the last line."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        bufsize=1,
    )
    stop.process = process
    last = ""
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        last = last_line(line) or last
    code = process.wait()
    if code != 0 and not last:
        last = f"{' '.join(command[:4])} exited with code {code} and printed nothing"
    return code, last


def write_termination_message(path: Path, message: str) -> None:
    try:
        path.write_text(message)
    except OSError:
        # Not in a Pod (or no write access): the log still ends with the same line.
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra.job_runner",
        description="Install the pinned benchmark client if needed, then run "
        "`python -m benchmarks ARGS...` and keep its last line as the termination message.",
    )
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the source tree to run (holds constraints.txt)")
    parser.add_argument("--venv", type=Path, default=Path("/work/venv"),
                        help="where to install the packages the image lacks")
    parser.add_argument("--termination-log", type=Path, default=Path("/dev/termination-log"))
    parser.add_argument("--on-stop", default="the pod was stopped before the command ended",
                        help="what a stop (SIGTERM) means and what to do, for the last line")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="-- then the arguments of `python -m benchmarks`")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    if not command_args:
        build_parser().error("give the benchmarks command after --")
    stop = Stop()
    packages = COMMAND_PACKAGES.get(command_args[0], ())
    try:
        python = prepare_python(args.src, args.venv, packages,
                                lambda line: print(line, flush=True))
    except (OSError, ValueError, InstallError, KeyboardInterrupt) as error:
        message = stop.message(args.on_stop) if stop.signal else (
            f"runner: could not install {', '.join(packages)}: {error}; check "
            "benchmarkPipIndexUrl (and that the pods reach it), or set benchmarkImage to "
            "an image that has the pinned client (README, 'Clusters without registry access')")
        print(message, flush=True)
        write_termination_message(args.termination_log, message)
        return 1
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(args.src), env.get("PYTHONPATH", "")) if part
    )
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = os.pathsep.join((str(Path(python).parent), env.get("PATH", "")))
    code, last = run_streaming([python, "-m", "benchmarks", *command_args], env, stop)
    if stop.signal:
        # What the command printed as it stopped (a resume hint) is not the cause.
        last = stop.message(args.on_stop)
        print(last, flush=True)
    write_termination_message(args.termination_log, last)
    return code


if __name__ == "__main__":
    sys.exit(main())
