"""The OS sandbox of stdio MCP servers: a bubblewrap (``bwrap``) profile per server.

A spawned server sees a read-only view of the system (``/usr``, ``/lib*``, a few files of
``/etc``), its own program (the interpreter, its prefix, the virtual environment and the
script's folder), a private writable ``/tmp``, and only the paths its entry declares::

    "sandbox": {"paths": [{"path": "~/projects/x", "mode": "rw"}],
                "network": ["api.github.com:443"],
                "limits": {"memoryMB": 4096, "cpuSeconds": 3600, "processes": 256,
                           "openFiles": 1024}}

or ``"sandbox": "off"`` (reviewed in red). It runs in new user, PID, network, IPC and UTS
namespaces (the whole process tree ends with it: ``setsid`` cannot escape the PID namespace),
without capabilities, as uid 65534, with a minimal environment (``HOME=/tmp``). Declared
``host:port`` destinations are reached through the gateway's allow-listing CONNECT proxy
(:mod:`anfitrion.mcp._egress`): nothing else, and no DNS.

The profile is part of the server's pinned identity (:func:`profile_identity`); a profile
that grants more than the approved one (:func:`widenings`) blocks the server until reviewed.

:func:`bwrap_argv` builds the command line from a profile: a pure function, tested as such.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._home import environment
from ..exceptions import UserError

__all__ = [
    "DEFAULT_LIMITS",
    "INSTALL_HINT",
    "PathGrant",
    "SandboxLimits",
    "SandboxProfile",
    "SandboxUnavailable",
    "bwrap_argv",
    "bwrap_problem",
    "describe_profile",
    "parse_sandbox",
    "profile_identity",
    "program_paths",
    "widenings",
]

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf "
                "install bubblewrap), or set \"sandbox\": \"off\" in the server's entry")
SANDBOX_UID = 65534
SANDBOX_HOME = "/tmp"
PROXY_SOCKET = "/run/anfitrion/egress.sock"
"""Where the gateway's egress proxy socket appears inside the sandbox."""
PROXY_PORT = 3128
"""The port of the HTTP proxy inside the sandbox's own loopback (``HTTPS_PROXY``)."""

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = ("alternatives", "ca-certificates", "ca-certificates.conf", "crypto-policies",
               "fonts", "gai.conf", "group", "host.conf", "hosts", "ld.so.cache", "ld.so.conf",
               "ld.so.conf.d", "localtime", "mime.types", "nsswitch.conf", "os-release",
               "passwd", "pki", "protocols", "services", "ssl", "timezone", "zoneinfo")
"""What of ``/etc`` a server sees (never ``shadow``, ``ssh`` host keys or ``sudoers``)."""


class SandboxUnavailable(UserError):
    """The sandbox cannot run here (no ``bwrap``, or user namespaces are not allowed)."""


@dataclass(frozen=True, slots=True)
class PathGrant:
    """One declared path: read-only (``ro``) or read-write (``rw``)."""

    path: str
    mode: str = "ro"


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits (``setrlimit``) of the server and every process it starts."""

    memory_mb: int = 4096
    """Address space per process (``RLIMIT_AS``), in MiB."""
    cpu_seconds: int = 3600
    """CPU time per process (``RLIMIT_CPU``)."""
    processes: int = 256
    """Processes in the sandbox (a ``pids`` cgroup where one can be made, and
    ``RLIMIT_NPROC``)."""
    open_files: int = 1024
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""

    def as_dict(self) -> dict[str, int]:
        return {"memoryMB": self.memory_mb, "cpuSeconds": self.cpu_seconds,
                "processes": self.processes, "openFiles": self.open_files}


DEFAULT_LIMITS = SandboxLimits()
_LIMIT_KEYS = {"memoryMB": "memory_mb", "cpuSeconds": "cpu_seconds", "processes": "processes",
               "openFiles": "open_files"}
_LIMIT_MAX = {"memoryMB": 1 << 20, "cpuSeconds": 10 ** 7, "processes": 1 << 16,
              "openFiles": 1 << 20}


@dataclass(frozen=True, slots=True)
class SandboxProfile:
    """What a sandboxed server may reach (see the module's documentation)."""

    enabled: bool = True
    """``False``: ``"sandbox": "off"`` — the server runs as the gateway's user, unconfined."""
    paths: tuple[PathGrant, ...] = ()
    network: tuple[str, ...] = ()
    """``host:port`` destinations reachable through the egress proxy; empty: no network."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)


OFF = SandboxProfile(enabled=False)
_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])"
                        r":(?P<port>[0-9]{1,5})")


class ProfileError(UserError):
    """A ``sandbox`` entry that is not valid; the message names the key (after a ``|``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _clean_path(raw: Any, *, key: str, base: str | None, home: str | None) -> str:
    if not isinstance(raw, str) or not raw or "\x00" in raw or not raw.isprintable():
        raise ProfileError(key, "must be a non-empty path of visible characters")
    path = raw
    if path == "~" or path.startswith("~/"):
        if not home:
            raise ProfileError(key, "starts with ~ but HOME is not set")
        path = home + path[1:]
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    if ".." in Path(path).parts:
        raise ProfileError(key, "must not contain '..' (name the folder itself)")
    path = os.path.normpath(path)
    if path in ("/", "//"):
        raise ProfileError(key, "granting / would undo the sandbox: name the folders needed")
    return path


def _paths(raw: Any, *, key: str, base: str | None, home: str | None) -> tuple[PathGrant, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > 256:
        raise ProfileError(key, "must be a list of {\"path\": ..., \"mode\": \"ro\"|\"rw\"} "
                                "(at most 256)")
    grants: dict[str, PathGrant] = {}
    for i, item in enumerate(raw):
        at = f"{key}[{i}]"
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict) or set(item) - {"path", "mode"} or "path" not in item:
            raise ProfileError(at, "must be {\"path\": ..., \"mode\": \"ro\"|\"rw\"}")
        mode = item.get("mode", "ro")
        if mode not in ("ro", "rw"):
            raise ProfileError(f"{at}.mode", "must be \"ro\" or \"rw\"")
        path = _clean_path(item["path"], key=f"{at}.path", base=base, home=home)
        if path in grants and grants[path].mode == "rw":
            continue
        grants[path] = PathGrant(path, mode)
    return tuple(sorted(grants.values(), key=lambda g: g.path))


def _network(raw: Any, *, key: str) -> tuple[str, ...]:
    if raw is None or raw == "none":
        return ()
    if not isinstance(raw, list) or len(raw) > 256:
        raise ProfileError(key, "must be \"none\" or a list of \"host:port\" (at most 256)")
    hosts: set[str] = set()
    for i, item in enumerate(raw):
        match = _HOST_PORT.fullmatch(item) if isinstance(item, str) else None
        if match is None or not 0 < int(match["port"]) < 65536:
            raise ProfileError(f"{key}[{i}]", "must be \"host:port\" (a name or address, a "
                                              "port from 1 to 65535; no wildcards)")
        hosts.add(f"{match['host'].lower()}:{int(match['port'])}")
    return tuple(sorted(hosts))


def _limits(raw: Any, *, key: str) -> SandboxLimits:
    if raw is None:
        return SandboxLimits()
    if not isinstance(raw, dict):
        raise ProfileError(key, "must be an object")
    unknown = sorted(set(raw) - set(_LIMIT_KEYS))
    if unknown:
        raise ProfileError(key, f"unknown keys {', '.join(repr(u[:40]) for u in unknown[:5])}")
    values: dict[str, int] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or not \
                0 < value <= _LIMIT_MAX[name]:
            raise ProfileError(f"{key}.{name}",
                               f"must be a whole number from 1 to {_LIMIT_MAX[name]}")
        values[_LIMIT_KEYS[name]] = value
    return SandboxLimits(**values)


def parse_sandbox(raw: Any, *, key: str, base: str | None = None,
                  home: str | None = None) -> SandboxProfile:
    """The ``sandbox`` entry of a server: absent (the default profile), ``"off"``, or an
    object with ``paths``, ``network`` and ``limits``.

    Args:
        key: the entry's dotted key, for errors.
        base: the folder relative paths are taken from (the config file's).
        home: what ``~`` stands for.

    Raises:
        ProfileError: naming the key that is wrong.
    """
    if raw is None:
        return SandboxProfile()
    if raw == "off":
        return OFF
    if not isinstance(raw, dict):
        raise ProfileError(key, "must be \"off\" or an object with paths, network, limits")
    unknown = sorted(set(raw) - {"paths", "network", "limits"})
    if unknown:
        raise ProfileError(key, f"unknown keys {', '.join(repr(u[:40]) for u in unknown[:5])}")
    return SandboxProfile(paths=_paths(raw.get("paths"), key=f"{key}.paths", base=base,
                                       home=home),
                          network=_network(raw.get("network"), key=f"{key}.network"),
                          limits=_limits(raw.get("limits"), key=f"{key}.limits"))


# -- identity, widening, words -------------------------------------------------------------

def profile_identity(profile: SandboxProfile) -> dict[str, Any]:
    """The profile as it is pinned (plain JSON)."""
    if not profile.enabled:
        return {"mode": "off"}
    return {"mode": "bwrap", "paths": [[g.path, g.mode] for g in profile.paths],
            "network": list(profile.network), "limits": profile.limits.as_dict()}


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def widenings(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """What *after* grants that *before* did not, said for a person; empty when *after* is
    the same or narrower. A profile never recorded counts as the default one."""
    old = dict(before or profile_identity(SandboxProfile()))
    if after.get("mode") == "off":
        return [] if old.get("mode") == "off" else ["sandbox turned off"]
    if old.get("mode") == "off":
        return []
    found: list[str] = []
    granted = [(str(p), str(m)) for p, m in old.get("paths") or []]
    for path, mode in after.get("paths") or []:
        if not any(_under(path, g) and (mode == "ro" or gm == "rw") for g, gm in granted):
            found.append(f"can {'write' if mode == 'rw' else 'read'} {path} (new)")
    for host in after.get("network") or []:
        if host not in (old.get("network") or []):
            found.append(f"can reach {host} (new)")
    old_limits = {**DEFAULT_LIMITS.as_dict(), **(old.get("limits") or {})}
    for name, value in (after.get("limits") or {}).items():
        if isinstance(value, int) and value > old_limits.get(name, 0):
            found.append(f"limit {name} raised {old_limits.get(name)} → {value}")
    return found


def _home_relative(path: str, home: str | None) -> str:
    if home and home != "/" and _under(path, home):
        return "~" + path[len(home.rstrip("/")):]
    return path


def describe_profile(profile: SandboxProfile, *, home: str | None = None) -> list[str]:
    """The profile in words, one line each ("can read ~/projects/x", "no other network")."""
    if not profile.enabled:
        return ["NOT SANDBOXED: runs as your user, with your files, network and processes"]
    home = home if home is not None else environment().get("HOME")
    lines = [f"can {'read and write' if g.mode == 'rw' else 'read'} "
             f"{_home_relative(g.path, home)}" for g in profile.paths]
    lines.append("can read the system (/usr, /lib), its own program; private /tmp")
    lines += [f"can reach {host}" for host in profile.network]
    lines.append("no other network" if profile.network else "no network")
    limits = profile.limits
    lines.append(f"limits: {limits.memory_mb} MiB memory, {limits.cpu_seconds} s CPU, "
                 f"{limits.processes} processes, {limits.open_files} open files")
    return lines


# -- what the program needs -------------------------------------------------------------------

def _which(command: str, path: str | None) -> str | None:
    if os.sep in command:
        return command if os.path.isfile(command) else None
    return shutil.which(command, path=path)


def _prefix_of(executable: str, home: str | None) -> str:
    """The folder an executable belongs to: the parent of its ``bin`` folder, else its own
    folder — never the home folder or ``/`` itself (then only the file)."""
    folder = os.path.dirname(executable)
    if os.path.basename(folder) == "bin":
        folder = os.path.dirname(folder)
    if folder in ("/", "") or (home and home != "/" and _under(home, folder)):
        return executable
    return folder


def _venv_paths(executable: str, home: str | None) -> list[str]:
    """A Python virtual environment's folder, its base interpreter's prefix, and the folders
    its ``.pth`` files add (editable installs)."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(executable)))
    cfg = os.path.join(venv, "pyvenv.cfg")
    if not os.path.isfile(cfg):
        return []
    found = [venv]
    for site in Path(venv).glob("lib/python*/site-packages"):
        for pth in sorted(site.glob("*.pth"))[:50]:
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()[:50]
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import")) and os.path.isabs(line) and \
                        os.path.isdir(line) and line != "/" and not (home and _under(home, line)):
                    found.append(os.path.normpath(line))
    return found


def _shebang(executable: str, path: str | None) -> str | None:
    try:
        with open(executable, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return _which(words[-1], path)
    return words[0]


def _script_folder(arg: str, home: str | None) -> str | None:
    if not os.path.isabs(arg) or not os.path.isfile(arg):
        return None
    parts = Path(arg).parts
    if "node_modules" in parts:  # the package's own tree: the folder holding node_modules
        return str(Path(*parts[:parts.index("node_modules")]))
    folder = os.path.dirname(arg)
    return None if folder == "/" or (home and _under(home, folder)) else folder


def program_paths(command: str, args: Sequence[str], *, path: str | None,
                  home: str | None, cwd: str | None = None) -> list[str]:
    """What a server's program needs to read: the executable and its prefix, a shebang's
    interpreter, a Python venv (and what its ``.pth`` files add), and the folder of a script
    given as an argument (for a Node package, the folder holding its ``node_modules``)."""
    found: list[str] = []
    executable = _which(command, path)
    if executable is not None:
        executable = os.path.abspath(executable)
        found += _venv_paths(executable, home)
        real = os.path.realpath(executable)
        found += [executable, real, _prefix_of(real, home)]
        interpreter = _shebang(real, path)
        if interpreter and os.path.isfile(interpreter):
            found += _venv_paths(interpreter, home)
            real_interpreter = os.path.realpath(interpreter)
            found += [interpreter, real_interpreter, _prefix_of(real_interpreter, home)]
    for arg in args:
        absolute = arg if os.path.isabs(arg) or cwd is None else os.path.join(cwd, arg)
        folder = _script_folder(os.path.normpath(absolute), home)
        if folder is not None:
            found.append(folder)
    out: list[str] = []
    for item in found:
        item = os.path.normpath(item)
        if item not in out and not item.startswith(("/proc", "/sys", "/dev")) and item != "/":
            out.append(item)
    return out


# -- the command line -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Launch:
    """A sandboxed launch: the argv, the environment, and what to clean up after."""

    argv: list[str]
    env: dict[str, str]


def _bind_system(args: list[str]) -> None:
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for entry in ETC_ENTRIES:
        source = os.path.join("/etc", entry)
        if os.path.lexists(source):
            args += ["--ro-bind-try", source, source]


def bwrap_argv(profile: SandboxProfile, command: Sequence[str], *, bwrap: str = "bwrap",
               program: Iterable[str] = (), hidden: Iterable[str] = (), cwd: str | None = None,
               proxy_socket: str | None = None, forwarder: Sequence[str] = (),
               masks: Mapping[str, str] | None = None) -> list[str]:
    """The ``bwrap`` command line that runs *command* inside *profile*.

    Args:
        program: folders and files the program itself needs, read-only
            (:func:`program_paths`).
        hidden: files and folders that stay out of sight even inside a granted folder (the
            store's database, the policy, the config): replaced by an empty file or folder.
        cwd: the working directory (granted read-only when not granted otherwise).
        proxy_socket: the gateway's egress proxy socket, bound at :data:`PROXY_SOCKET`.
        forwarder: the command that runs inside and forwards the sandbox's own loopback to
            the proxy socket, then runs *command* (only with a proxy).
        masks: for hidden paths, the empty stand-in bound read-only over each (watched by
            the gateway); a hidden path without one is masked by ``/dev/null`` (a file) or
            an empty read-only ``tmpfs`` (a folder).
    """
    masks = masks or {}
    if not profile.enabled:
        raise UserError("the profile is off: nothing to build")
    args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--unshare-net", "--uid", str(SANDBOX_UID), "--gid",
            str(SANDBOX_UID), "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL"]
    _bind_system(args)
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    granted = {g.path for g in profile.paths}
    reads = [p for p in program if p not in granted]
    if cwd is not None and not any(_under(cwd, g) for g in granted):
        reads.append(cwd)
    reads = list(dict.fromkeys(reads))
    for item in reads:  # what a bound folder holds already is not bound again
        if not any(f != item and _under(item, f) for f in reads):
            args += ["--ro-bind-try", item, item]
    for grant in profile.paths:  # after the program's: a grant inside it wins
        args += ["--bind-try" if grant.mode == "rw" else "--ro-bind-try", grant.path, grant.path]
    bound = [*reads, *granted]
    for item in hidden:  # masked where a bound folder would show it; elsewhere it is absent
        if not any(_under(item, b) for b in bound):
            continue
        if item in masks:  # a watched stand-in (mcp/_sandbox_watch.py)
            args += ["--ro-bind", masks[item], item]
        elif os.path.isdir(item):
            args += ["--tmpfs", item, "--remount-ro", item]
        elif os.path.lexists(item):
            args += ["--ro-bind", "/dev/null", item]
    if proxy_socket is not None:
        args += ["--ro-bind", proxy_socket, PROXY_SOCKET]
    limits = profile.limits
    args += ["--remount-ro", "/", "--chdir", cwd or SANDBOX_HOME, "--",
             "prlimit", f"--as={limits.memory_mb * 1024 * 1024}",
             f"--cpu={limits.cpu_seconds}", f"--nofile={limits.open_files}",
             f"--nproc={limits.processes}", "--"]
    if proxy_socket is not None:
        args += list(forwarder)
    return args + list(command)


def sandbox_env(env: Mapping[str, str], profile: SandboxProfile) -> dict[str, str]:
    """The server's environment inside: *env* with ``HOME`` private, and the proxy's address
    when the profile declares destinations."""
    out = {**env, "HOME": SANDBOX_HOME, "TMPDIR": "/tmp"}
    if profile.network:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        out.update(HTTPS_PROXY=proxy, HTTP_PROXY=proxy, https_proxy=proxy, http_proxy=proxy,
                   ALL_PROXY=proxy, NO_PROXY="", no_proxy="")
    return out


@functools.cache
def bwrap_problem() -> str | None:
    """Why the sandbox cannot run here, or ``None`` (checked once: ``bwrap`` is found and
    can make the namespaces; ``prlimit`` is found)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if shutil.which("prlimit") is None:
        return "prlimit (util-linux) is not installed"
    try:
        done = subprocess.run(
            [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent",
             "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"],
            capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return "bubblewrap cannot make its namespaces here: " + (reason[-1][:200] if reason
                                                                 else "unknown error")
    return None


def bwrap_path() -> str:
    """The ``bwrap`` executable.

    Raises:
        SandboxUnavailable: with the install hint.
    """
    problem = bwrap_problem()
    found = shutil.which("bwrap")
    if problem is not None or found is None:
        raise SandboxUnavailable(f"{problem or 'bubblewrap is not installed'}: {INSTALL_HINT}")
    return found


def python_forwarder() -> list[str]:
    """The forwarder's command: this interpreter runs :mod:`anfitrion.mcp._forwarder`'s file
    (by path: nothing else of anfitrion is imported inside the sandbox)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_forwarder.py")
    return [os.path.realpath(sys.executable), "-I", "-S", here]
