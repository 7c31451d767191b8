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
``MAX_ENTRIES``, the most recently used kept. It is used only when it matches this process exactly (the cache
format, the Python version and bytecode magic number, the ansible-core and Jinja versions), when it and its
directory belong to the user running ansible-playbook and nobody else can write them (the file 0600, the
directory 0700), and when it can be read whole; otherwise it is ignored and written anew. Code in it runs as
the collections in ``ANSIBLE_HOME`` do, which is where the strategy keeps it. A template that came from a vaulted
value is never written to it (its text is kept in this process only).

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
CACHE_FORMAT = 2
# Marks the key of a template that came from a vaulted value: never written to the cache file.
_VAULTED = object()
# Types a key of the file holds (marshal writes them as they are; a subclass such as a tagged str it refuses).
_PLAIN = (str, int, bool, float, type(None))

_state = {"installed": False, "hits": 0, "misses": 0, "loaded": 0, "cache_path": None, "cache_error": None,
          "saved": False}
_memo: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
# The text of the expression compile_expression is compiling: Jinja hands compile() a parsed node for it.
_expression = contextvars.ContextVar("gpunode_compile_memo_expression", default=None)


def stats():
    """``{"installed", "hits", "misses", "entries", "loaded", "cache_path", "cache_error", "saved"}`` of this
    process: ``loaded`` entries came from the cache file, ``cache_error`` says why it was not used (None when it
    was, or when there was none yet)."""
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


def _private(path, directory=False):
    """Why ``path`` cannot be trusted (another owner, writable by group or others, not the kind expected), or
    None."""
    info = os.lstat(path)
    if directory and not stat.S_ISDIR(info.st_mode) or not directory and not stat.S_ISREG(info.st_mode):
        return f"{path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user"
    if info.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def load(path):
    """Fill the memo from the cache file ``path``. Returns the number of entries taken; a file that is missing,
    not private, of another version or unreadable is ignored (``stats()["cache_error"]`` says why)."""
    try:
        why = _private(os.path.dirname(path) or ".", directory=True) or _private(path)
        if why:
            _state["cache_error"] = why
            return 0
        with open(path, "rb") as handle:
            header, entries = marshal.loads(handle.read())  # noqa: S302 -- the user's own 0600 file, checked above
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, EOFError, TypeError) as exc:
        _state["cache_error"] = f"{path}: {exc}"
        return 0
    if header != _header():
        _state["cache_error"] = f"{path}: written by another Python, ansible-core or Jinja"
        return 0
    taken = 0
    with _lock:
        for key, code in entries[-MAX_ENTRIES:]:
            if key not in _memo and isinstance(code, types.CodeType):
                _memo[key] = code
                taken += 1
        _state["loaded"] += taken
    return taken


def save(path):
    """Write the memo's plain-keyed entries to ``path`` (directory 0700, file 0600, atomically). Returns whether
    it wrote; nothing is written when this process compiled nothing new since it loaded the file."""
    with _lock:
        if not _state["misses"]:
            return False
        entries = [(key, code) for key, code in _memo.items() if _plain(key)][-MAX_ENTRIES:]
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if _private(directory, directory=True):
            return False
        data = marshal.dumps((_header(), entries))
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


def install(cache_path=None):
    """Memoize ``AnsibleEnvironment.compile`` for the rest of this process; with ``cache_path``, also load that
    cache file now and write it when this process exits. Returns whether the memo is on."""
    if _state["installed"]:
        return True
    try:
        from ansible._internal._datatag._tags import VaultedValue as vaulted_value
        from ansible._internal._templating import _jinja_bits
        from ansible._internal._templating._jinja_common import _TemplateConfig
        env_class = _jinja_bits.AnsibleEnvironment
        compile_context = _jinja_bits._TemplateCompileContext
        override_fields = tuple(_jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES)
        original_compile = env_class.compile
        original_compile_expression = env_class.compile_expression
        _TemplateConfig.allow_embedded_templates  # noqa: B018 -- present in the ansible-core the key was written for
    except (ImportError, AttributeError):
        return False

    def compile_expression(self, source, *args, **kwargs):
        token = _expression.set((str.__str__(source) if isinstance(source, str) else str(source),
                                 vaulted_value.is_tagged_on(source)))
        try:
            return original_compile_expression(self, source, *args, **kwargs)
        finally:
            _expression.reset(token)

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # noqa: A001 -- Jinja's name
        if raw or self._debuggable_template_source:
            return original_compile(self, source, name, filename, raw, defer_init)
        vaulted = False
        if isinstance(source, str):
            kind, text = "template", str.__str__(source)
            vaulted = vaulted_value.is_tagged_on(source)
        else:
            text, vaulted = _expression.get() or (None, False)
            if text is None:  # a node that did not come from compile_expression
                return original_compile(self, source, name, filename, raw, defer_init)
            kind = "expression"
        _expression.set(None)  # the one node compile_expression hands on; nothing nested reuses the text
        # A template that came from a vaulted value stays in this process: its key is not plain data (_VAULTED).
        context = compile_context.current(optional=True)
        key = (text, kind, name, filename, defer_init, bool(context and context.escape_backslashes),
               bool(_TemplateConfig.allow_embedded_templates), _name_of(type(self)),
               tuple(getattr(self, field) for field in override_fields),
               self.optimized, self.autoescape, _name_of(self.finalize), tuple(sorted(self.extensions)),
               bool(self.is_async)) + ((_VAULTED,) if vaulted else ())
        with _lock:
            code = _memo.get(key)
            if code is not None:
                _memo.move_to_end(key)
                _state["hits"] += 1
                return code
        code = original_compile(self, source, name, filename, raw, defer_init)
        with _lock:
            _state["misses"] += 1
            _memo[key] = code
            if len(_memo) > MAX_ENTRIES:
                _memo.popitem(last=False)
        return code

    env_class.compile = compile
    env_class.compile_expression = compile_expression
    _state["installed"] = True
    if cache_path:
        _state["cache_path"] = str(cache_path)
        load(str(cache_path))
        atexit.register(_save_at_exit, str(cache_path), os.getpid())
    return True
