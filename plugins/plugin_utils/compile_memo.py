# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compile each Jinja template and conditional of a run once per process instead of once per task line and host.

ansible-core 2.19 compiles a template (parse, generate Python, ``compile()``) every time it renders one, and
keeps nothing. A role's task line renders the same strings for every host, and the discovery role's lines are
imported by four plays, so a run compiles the same text many times: on the simulated three-host fleet about
half of a plan line's CPU. ``install()`` memoizes the compiled code object on the ansible-playbook process's
``AnsibleEnvironment``. A worker forked after a compile inherits it.

The memo key is everything the compiled code depends on: the source text, whether it is a template or an
expression, the name and file name given, the compile-time context (``escape_backslashes``), the environment's
class, its lexer settings (the template override fields), ``optimized``, ``autoescape``, ``finalize``, its Jinja
extensions (``DEFAULT_JINJA2_EXTENSIONS``), whether it is async, and Ansible's ``ALLOW_EMBEDDED_TEMPLATES``.
Only trusted templates reach the compiler (Ansible checks trust first), and only the code object is kept:
rendering still builds a new template object with the environment and globals of that call. Template debugging
(``_debuggable_template_source``) and ``raw`` compiles bypass it.

Across runs (``install(cache_path)``, as the ``inline`` strategy calls it): the code objects are kept in one file,
as Jinja's own bytecode cache keeps compiled templates (``marshal``), so that a re-run compiles only what it had
not compiled before. The file is read when the memo is installed and written once when ansible-playbook exits,
only when the run compiled something new (atomically: a temporary file in the same directory, then a rename).
It holds the entries whose key is plain data (the environment's class and ``finalize`` by their names), at most
``MAX_ENTRIES``, the most recently used kept, each with the filters and tests Jinja's code generator looked up for
it: whether each was there, and how it is passed its context (the ``pass_*`` decorators), both of which the
generated code depends on. An entry taken from the file is used only after these are found the same in this
process (plugins change between runs: another collection version, a ``filter_plugins`` directory); otherwise it
is compiled again. It is used only when it matches this process exactly (the cache
format, the Python version and bytecode magic number, the ansible-core and Jinja versions), when it and its
directory belong to the user running ansible-playbook and nobody else can write them (the file 0600, the
directory 0700), and when it can be read whole; otherwise it is ignored and written anew. Code in it runs as
the collections in ``ANSIBLE_HOME`` do, which is where the strategy keeps it. Only templates that came from a
plaintext file (Ansible's Origin tag) are written to it: never a vaulted value, a template from a file that
ansible-vault encrypted whole, or one whose file is not known (those are kept in this process only).

This hooks ``ansible._internal``, which is not a public API; meta/runtime.yml pins ansible-core 2.19, whose
classes these are. When they are not there, ``install()`` changes nothing and returns False.
"""

from __future__ import annotations

import atexit
import collections
import contextvars
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
import threading
import types

MAX_ENTRIES = 8192
# Bumped whenever the file's layout or the key's fields change.
CACHE_FORMAT = 3
# Marks the key of a template that may not be written to the cache file (_writable_origin).
_LOCAL = object()
# The first bytes of a file that ansible-vault encrypted whole.
_VAULT_HEADER = b"$ANSIBLE_VAULT"
# Types a key of the file holds (marshal writes them as they are; a subclass such as a tagged str it refuses).
_PLAIN = (str, int, bool, float, type(None))

_state = {"installed": False, "hits": 0, "misses": 0, "new": 0, "loaded": 0, "stale": 0, "cache_path": None,
          "cache_error": None, "saved": False}
# key -> (code, deps): deps are the filters and tests the code generator looked up, ``(kind, name, pass_arg,
# found)``. Keys loaded from the cache file are in _unverified until their deps are checked at their first use.
_memo: collections.OrderedDict = collections.OrderedDict()
_unverified: set = set()
_lock = threading.Lock()
# While this module compiles: the list the filter and test lookups of the code generator are recorded in.
_recording = contextvars.ContextVar("gpunode_compile_memo_recording", default=None)
# ansible-core's Origin and VaultedValue tags (set by install()), and whether each source file is plaintext.
_origin = _vaulted_value = None
_plaintext: dict = {}
# The text of the expression compile_expression is compiling: Jinja hands compile() a parsed node for it.
_expression = contextvars.ContextVar("gpunode_compile_memo_expression", default=None)


def stats():
    """``{"installed", "hits", "misses", "new", "entries", "loaded", "stale", "cache_path", "cache_error",
    "saved"}`` of this process: ``new`` of the misses may be written to the cache file, ``loaded`` entries came
    from it, ``stale`` of those were compiled again (a filter or test is not what it was), ``cache_error`` says why
    the file was not used (None when it was, or when there was none yet)."""
    with _lock:
        return {**_state, "entries": len(_memo)}


def _name_of(obj):
    """A stable name for a class or function of the key (``module.qualname``), or the object itself when it has
    none (such an entry stays in this process only)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if obj is None or not (isinstance(module, str) and isinstance(qualname, str)) or "<" in qualname:
        return obj
    return f"{module}.{qualname}"


def _plain(value):
    """Whether ``value`` is plain data marshal writes as it is (exact str, int, bool, float, None, tuples)."""
    kind = type(value)  # exact types: marshal refuses subclasses (a tagged str)
    if kind is tuple:
        return all(_plain(item) for item in value)
    return kind in _PLAIN


def _header():
    import jinja2
    from ansible.release import __version__ as ansible_version
    return (CACHE_FORMAT, sys.version, importlib.util.MAGIC_NUMBER, ansible_version, jinja2.__version__)


def _refusal(info, path, directory=False):
    """Why a file or directory with ``info`` (its stat) cannot be trusted (another owner, writable by group or
    others, not the kind expected), or None."""
    if directory and not stat.S_ISDIR(info.st_mode) or not directory and not stat.S_ISREG(info.st_mode):
        return f"{path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user"
    if info.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _private(path, directory=False):
    """_refusal of ``path`` itself (lstat: a symbolic link is neither a regular file nor a directory)."""
    return _refusal(os.lstat(path), path, directory)


def _entries(loaded):
    """The entries of a cache file's body that have the shape save() writes: ``[(key, code, deps)]``."""
    if not isinstance(loaded, list):
        raise ValueError("the cache body is not a list")
    return [entry for entry in loaded
            if isinstance(entry, tuple) and len(entry) == 3 and _plain(entry[0]) and _plain(entry[2])
            and isinstance(entry[1], types.CodeType)]


def load(path):
    """Fill the memo from the cache file ``path``. Returns the number of entries taken; a file that is missing,
    not private, of another version or unreadable is ignored (``stats()["cache_error"]`` says why). Each entry
    taken is checked against the filters and tests it was compiled with before its first use (_deps_hold)."""
    try:
        why = _private(os.path.dirname(path) or ".", directory=True)
        if why:
            _state["cache_error"] = why
            return 0
        # Opened without following a link, then judged on what was opened (no gap between the check and the read).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            why = _refusal(os.fstat(handle.fileno()), path)
            if why:
                _state["cache_error"] = why
                return 0
            if marshal.load(handle) != _header():  # noqa: S302 -- the user's own 0600 file, checked above
                _state["cache_error"] = f"{path}: written by another Python, ansible-core or Jinja"
                return 0
            entries = _entries(marshal.load(handle))  # noqa: S302 -- as above, and of this Python
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, EOFError, TypeError) as exc:
        _state["cache_error"] = f"{path}: {exc}"
        return 0
    taken = 0
    with _lock:
        for key, code, deps in entries[-MAX_ENTRIES:]:
            if key not in _memo:
                _memo[key] = (code, deps)
                _unverified.add(key)
                taken += 1
        _state["loaded"] += taken
    return taken


def save(path):
    """Write the memo's entries that may leave this process (plain keys) to ``path`` (directory 0700, file 0600,
    atomically): the header, then ``[(key, code, deps)]``. Returns whether it wrote; nothing is written when this
    process compiled nothing new that may be written."""
    with _lock:
        if not _state["new"]:
            return False
        entries = [(key, code, deps) for key, (code, deps) in _memo.items() if _plain(key)][-MAX_ENTRIES:]
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if _private(directory, directory=True):
            return False
        data = marshal.dumps(_header()) + marshal.dumps(entries)
        fd, temporary = tempfile.mkstemp(prefix=".compile-cache-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except (OSError, ValueError) as exc:
        _state["cache_error"] = f"{path}: not written: {exc}"
        return False
    _state["saved"] = True
    return True


def _save_at_exit(path, pid):
    if os.getpid() == pid:  # not in a forked worker that exits through Python
        save(path)


def _pass_arg(func):
    """How Jinja passes its context to a filter or test (the ``pass_*`` decorators), compiled into the code:
    ``context``, ``eval_context``, ``environment`` or None."""
    from jinja2.utils import _PassArg

    found = _PassArg.from_obj(func) if func is not None else None
    return found.name if found is not None else None


def _deps_hold(env, deps):
    """Whether every filter and test a loaded entry was compiled with is still there, or still missing, and is
    passed the same arguments (the code Jinja generated for it depends on both)."""
    token = _recording.set(None)
    try:
        for kind, name, pass_arg, found in deps:
            try:
                func = (env.filters if kind == "filter" else env.tests).get(name)
            except Exception:  # noqa: BLE001 -- a plugin that no longer loads: compile again, which reports it
                return False
            if (func is not None) != found or _pass_arg(func) != pass_arg:
                return False
        return True
    finally:
        _recording.reset(token)


def _writable_origin(source):
    """Whether the compiled ``source`` may be written to the cache file: it came from a file (Ansible's Origin
    tag) that is not vault-encrypted, and it is not a vaulted value. Anything else (a vaulted value, a file
    encrypted whole, a template without a known file) stays in this process."""
    if _vaulted_value is None or _vaulted_value.is_tagged_on(source):
        return False
    origin = _origin.get_tag(source)
    path = getattr(origin, "path", None)
    if not isinstance(path, str) or not path:
        return False
    plaintext = _plaintext.get(path)
    if plaintext is None:
        try:
            with open(path, "rb") as handle:
                plaintext = not handle.read(len(_VAULT_HEADER)).startswith(_VAULT_HEADER)
        except OSError:
            plaintext = False
        _plaintext[path] = plaintext
    return plaintext


def install(cache_path=None):
    """Memoize ``AnsibleEnvironment.compile`` for the rest of this process; with ``cache_path``, also load that
    cache file now and write it when this process exits. Returns whether the memo is on."""
    if _state["installed"]:
        return True
    try:
        from ansible._internal._datatag._tags import Origin, VaultedValue
        from ansible._internal._templating import _jinja_bits, _jinja_plugins
        from ansible._internal._templating._jinja_common import _TemplateConfig
        env_class = _jinja_bits.AnsibleEnvironment
        intercept_class = _jinja_plugins.JinjaPluginIntercept
        compile_context = _jinja_bits._TemplateCompileContext
        override_fields = tuple(_jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES)
        original_compile = env_class.compile
        original_compile_expression = env_class.compile_expression
        original_get = intercept_class.get
        _TemplateConfig.allow_embedded_templates  # noqa: B018 -- present in the ansible-core the key was written for
    except (ImportError, AttributeError):
        return False
    global _origin, _vaulted_value  # noqa: PLW0603 -- set once, by the install that hooks the compiler
    _origin, _vaulted_value = Origin, VaultedValue

    def get(self, key, default=None):
        # Jinja's code generator looks each filter and test up here (a missing one fails the compile; how it is
        # passed its context is written into the code): recorded while this module compiles.
        func = original_get(self, key, default)
        record = _recording.get()
        if record is not None:
            record.append((self._plugin_loader.type, str(key), _pass_arg(func), func is not None))
        return func

    def compile_expression(self, source, *args, **kwargs):
        token = _expression.set((str.__str__(source) if isinstance(source, str) else str(source),
                                 _writable_origin(source)))
        try:
            return original_compile_expression(self, source, *args, **kwargs)
        finally:
            _expression.reset(token)

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # noqa: A001 -- Jinja's name
        if raw or self._debuggable_template_source:
            return original_compile(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            kind, text, writable = "template", str.__str__(source), _writable_origin(source)
        else:
            text, writable = _expression.get() or (None, False)
            if text is None:  # a node that did not come from compile_expression
                return original_compile(self, source, name, filename, raw, defer_init)
            kind = "expression"
        _expression.set(None)  # the one node compile_expression hands on; nothing nested reuses the text
        context = compile_context.current(optional=True)
        # An entry that may not leave this process (_writable_origin) has a key that is not plain data (_LOCAL).
        key = (text, kind, name, filename, defer_init, bool(context and context.escape_backslashes),
               bool(_TemplateConfig.allow_embedded_templates), _name_of(type(self)),
               tuple(getattr(self, field) for field in override_fields),
               self.optimized, self.autoescape, _name_of(self.finalize), tuple(sorted(self.extensions)),
               bool(self.is_async)) + (() if writable else (_LOCAL,))
        with _lock:
            entry = _memo.get(key)
            unverified = key in _unverified
        if entry is not None and unverified:
            holds = _deps_hold(self, entry[1])
            with _lock:
                _unverified.discard(key)
                if not holds:
                    _memo.pop(key, None)
                    _state["stale"] += 1
                    entry = None
        if entry is not None:
            with _lock:
                if key in _memo:
                    _memo.move_to_end(key)
                _state["hits"] += 1
            return entry[0]
        deps = []
        token = _recording.set(deps)
        try:
            code = original_compile(self, source, name, filename, raw, defer_init)
        finally:
            _recording.reset(token)
        with _lock:
            _state["misses"] += 1
            if writable:
                _state["new"] += 1
            _memo[key] = (code, tuple(dict.fromkeys(deps)))
            _memo.move_to_end(key)
            while len(_memo) > MAX_ENTRIES:
                _unverified.discard(_memo.popitem(last=False)[0])
        return code

    intercept_class.get = get
    env_class.compile = compile
    env_class.compile_expression = compile_expression
    _state["installed"] = True
    if cache_path:
        _state["cache_path"] = str(cache_path)
        load(str(cache_path))
        atexit.register(_save_at_exit, str(cache_path), os.getpid())
    return True
