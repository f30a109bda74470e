"""Running inside a kernel tree: the kernel selftests' drv-net library
(``tools/testing/selftests/drivers/net/hw/lib/py``), the tree's ``net.config``,
and opening the library's environment without a traceback.

Facts this follows (kernel 7.3, ``drivers/net/lib/py/env.py``):

* ``NetDrvEnvBase`` reads ``net.config`` from the directory of the ``src_path``
  it is given (the test script), on top of a copy of the environment: a key
  in the file replaces the same variable from the environment, a key only in
  the environment is kept;
* without ``NETIF`` it builds netdevsim devices (``modprobe netdevsim``),
  which have no devmem and cannot be loaded on many hosts;
* ``KsftSkipEx`` / ``KsftXfailEx`` raised while the environment is being set
  up, and every other error there, escape the test script's ``with``.

So a script of ours that sits in ``hw/`` or in a directory below it (the
README's two placements) looks for ``net.config`` beside itself, then in
``hw/``; hands the library a ``src_path`` in the directory of the file it
found (so the library reads that file); skips the whole run when ``NETIF``
is set nowhere; and turns set-up errors into a KTAP skip (exit 4) or bail-out
(exit 1) line.

Standard library only.
"""

import contextlib
import errno
import importlib
import os
import sys

import ksft_env

# What our scripts use from the kernel's lib.py; a lib.py without them is not used.
KERNEL_LIB_NAMES = ("NetDrvEpEnv", "ksft_run", "ksft_exit", "KsftSkipEx")


def find_kernel_lib(script_dir, environ, names=KERNEL_LIB_NAMES):
    """``(module, hw_dir)``: the kernel's ``lib.py`` package and the directory
    holding it, when ``script_dir`` or its parent has ``lib/py/__init__.py``
    and the package imports and has ``names``; else None (also when
    ``DEVMEM_PY_STANDALONE=1``).  An unusable lib.py is reported as a KTAP
    comment."""
    if environ.get("DEVMEM_PY_STANDALONE") == "1":
        return None
    for d in (script_dir, os.path.dirname(script_dir)):
        if not os.path.isfile(os.path.join(d, "lib", "py", "__init__.py")):
            continue
        if d not in sys.path:
            sys.path.append(d)  # after our own directory: our helpers win
        try:
            mod = importlib.import_module("lib.py")
            for name in names:
                getattr(mod, name)
            return mod, d
        except (ImportError, AttributeError) as exc:
            ksft_env.ktap_comment(f"kernel lib.py in {d} not usable ({exc}); running stand-alone")
            return None
    return None


def config_path(script_dir, hw_dir):
    """The ``net.config`` the run uses: beside the script, else in ``hw_dir``;
    None when neither exists."""
    for d in (script_dir, hw_dir):
        path = os.path.join(d, "net.config")
        if os.path.isfile(path):
            return path
    return None


def merged_config(path, environ):
    """The variables the kernel library will see: ``environ`` with the keys of
    the file at ``path`` (when not None) put over it.  Raises ConfigError for a
    line the library could not parse either."""
    cfg = dict(environ)
    if path:
        with open(path, encoding="utf-8") as f:
            cfg.update(ksft_env.parse_config_text(f.read()))
    return cfg


class TreeSetupError(Exception):
    """The run cannot start; ``code`` is the kselftest exit code the caller
    returns after printing the KTAP line (4 skip, 1 bail out)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def src_path_for(script_file, hw_dir, environ):
    """The ``src_path`` to hand the kernel library's environment class so that it
    reads the tree's ``net.config``: a path with this script's name in the
    directory of the config file found by config_path (or the script itself
    when there is none).  Raises TreeSetupError (skip) when ``NETIF`` is set
    neither in that file nor in ``environ``: the library would fall back to
    netdevsim, which has no devmem."""
    script_dir = os.path.dirname(os.path.abspath(script_file))
    path = config_path(script_dir, hw_dir)
    try:
        cfg = merged_config(path, environ)
    except ksft_env.ConfigError as exc:
        raise TreeSetupError(str(exc), ksft_env.KSFT_FAIL) from None
    if not cfg.get("NETIF"):
        places = [os.path.join(script_dir, "net.config")]
        if os.path.abspath(hw_dir) != script_dir:
            places.append(os.path.join(hw_dir, "net.config"))
        raise TreeSetupError(
            f"NETIF is not set (environment, {' or '.join(places)}); the kernel library would use "
            "netdevsim, which has no devmem",
            ksft_env.KSFT_SKIP,
        )
    base = os.path.dirname(path) if path else script_dir
    return os.path.join(base, os.path.basename(script_file))


@contextlib.contextmanager
def opened_env(klib, env_class, src_path, **kwargs):
    """``with opened_env(...) as cfg``: ``env_class(src_path, **kwargs)`` entered
    and, at the block's end, exited (the library's ``with``).  A skip of the
    library during set-up (KsftSkipEx, KsftXfailEx) and a netlink EOPNOTSUPP
    (the kernel lacks a feature the set-up uses) become TreeSetupError with
    exit 4, any other set-up error TreeSetupError with exit 1, its message
    naming the class and the error."""
    skips = tuple(t for t in (getattr(klib, "KsftSkipEx", None), getattr(klib, "KsftXfailEx", None)) if t)
    name = getattr(env_class, "__name__", str(env_class))
    env = None
    try:
        env = env_class(src_path, **kwargs)
        cfg = env.__enter__()
    except skips as exc:
        env = None  # a half-built environment cleans up in its __del__
        raise TreeSetupError(f"{name}: {exc}", ksft_env.KSFT_SKIP) from None
    except Exception as exc:  # the library raises bare Exception, CmdExitFailure, NlError ...
        env = None
        if type(exc).__name__ == "NlError" and getattr(exc, "error", None) == errno.EOPNOTSUPP:
            # The kernel lacks what the set-up asks for (netkit: "Unknown device type").
            raise TreeSetupError(f"{name}: the kernel does not support a set-up step: {exc}",
                                 ksft_env.KSFT_SKIP) from None
        text = " ".join(str(a) for a in exc.args) if exc.args else ""
        raise TreeSetupError(f"{name} set-up failed: {type(exc).__name__}: {text}".rstrip(": "),
                             ksft_env.KSFT_FAIL) from None
    try:
        yield cfg
    finally:
        env.__exit__(None, None, None)


def report(err):
    """Prints the KTAP line of a TreeSetupError (``1..0 # SKIP`` or
    ``Bail out!``) and returns its exit code."""
    if err.code == ksft_env.KSFT_SKIP:
        return ksft_env.ktap_skip_all(err)
    return ksft_env.ktap_bail_out(err)
