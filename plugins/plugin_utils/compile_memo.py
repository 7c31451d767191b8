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
class, its lexer settings (the template override fields), ``optimized``, ``autoescape``, ``finalize``, and
Ansible's ``ALLOW_EMBEDDED_TEMPLATES``. Only trusted templates reach the compiler (Ansible checks trust
first), and only the code object is kept: rendering still builds a new template object with the environment
and globals of that call. Template debugging (``_debuggable_template_source``) and ``raw`` compiles bypass it.

This hooks ``ansible._internal``, which is not a public API; meta/runtime.yml pins ansible-core 2.19, whose
classes these are. When they are not there, ``install()`` changes nothing and returns False.
"""

from __future__ import annotations

import collections
import contextvars
import threading

MAX_ENTRIES = 8192

_state = {"installed": False, "hits": 0, "misses": 0}
_memo: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
# The text of the expression compile_expression is compiling: Jinja hands compile() a parsed node for it.
_expression = contextvars.ContextVar("gpunode_compile_memo_expression", default=None)


def stats():
    """``{"installed", "hits", "misses", "entries"}`` of this process."""
    with _lock:
        return {**_state, "entries": len(_memo)}


def install():
    """Memoize ``AnsibleEnvironment.compile`` for the rest of this process. Returns whether the memo is on."""
    if _state["installed"]:
        return True
    try:
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
        token = _expression.set(str(source))
        try:
            return original_compile_expression(self, source, *args, **kwargs)
        finally:
            _expression.reset(token)

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # noqa: A001 -- Jinja's name
        if raw or self._debuggable_template_source:
            return original_compile(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            kind, text = "template", str(source)
        else:
            text = _expression.get()
            if text is None:  # a node that did not come from compile_expression
                return original_compile(self, source, name, filename, raw, defer_init)
            kind = "expression"
        _expression.set(None)  # the one node compile_expression hands on; nothing nested reuses the text
        context = compile_context.current(optional=True)
        key = (text, kind, name, filename, defer_init, bool(context and context.escape_backslashes),
               _TemplateConfig.allow_embedded_templates, type(self),
               tuple(getattr(self, field) for field in override_fields),
               self.optimized, self.autoescape, self.finalize)
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
    return True
