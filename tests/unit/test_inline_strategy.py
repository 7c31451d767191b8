"""The inline strategy (plugins/strategy/inline.py): the same results as ansible.builtin.linear, with the task
lines that cannot reach a host run in ansible-playbook itself; and the compile memo under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))

INVENTORY = {"all": {"hosts": {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                               for name in ("h1", "h2", "h3")}}}

# Every kind of line the strategy treats differently: controller actions, a false `when`, a `when` that cannot
# be evaluated, a module, a loop, register, failures (ignored, rescued, failing one host), include_tasks,
# handlers, run_once and delegate_to. `ppid` is the process that evaluated the line's templates (the pipe
# lookup's parent): ansible-playbook itself, or a worker forked for the line.
PLAY = """
- name: Strategy equivalence
  hosts: all
  gather_facts: false
  tasks:
    - name: A controller action
      ansible.builtin.set_fact:
        fact_a: "{{ inventory_hostname }}-a"
        ppid_set_fact: "{{ lookup('ansible.builtin.pipe', 'echo $PPID') }}"

    - name: A meta with a false when
      ansible.builtin.meta: end_host
      when: false

    - name: An assert that passes
      ansible.builtin.assert:
        that: fact_a == inventory_hostname ~ '-a'
        quiet: true

    - name: An assert that fails on h2, ignored
      ansible.builtin.assert:
        that: inventory_hostname != 'h2'
        fail_msg: "{{ inventory_hostname }} is h2"
      ignore_errors: true

    - name: A module whose when is false on h1 only
      ansible.builtin.command: echo {{ inventory_hostname }}
      register: echo_out
      changed_when: false
      when: inventory_hostname != 'h1'

    - name: A when only the executor's variables make true
      ansible.builtin.command: echo {{ lookup('ansible.builtin.pipe', 'echo $PPID') }}
      changed_when: false
      when: ansible_host is defined

    - name: A module with a false when everywhere
      ansible.builtin.command: "false"
      when: false

    - name: A module whose false when counts its evaluations
      ansible.builtin.command: "false"
      when: lookup('ansible.builtin.pipe', 'echo x >> when-evaluated-$ANSIBLE_STRATEGY') is none

    - name: A when that cannot be evaluated, ignored
      ansible.builtin.debug:
        msg: never
      when: undefined_variable_here.attr
      ignore_errors: true

    - name: A loop of set_fact
      ansible.builtin.set_fact:
        looped: "{{ (looped | default([])) + [item] }}"
      loop: [1, 2]

    - name: Include tasks
      ansible.builtin.include_tasks: included.yml

    - name: A block whose fail is rescued
      block:
        - name: Fail on h3
          ansible.builtin.fail:
            msg: h3 fails
          when: inventory_hostname == 'h3'
      rescue:
        - name: Rescue
          ansible.builtin.set_fact:
            rescued_here: true

    - name: Notify a handler from a changed module
      ansible.builtin.command: "true"
      notify: A handler
      when: inventory_hostname == 'h3'

    - name: Once for all hosts
      ansible.builtin.set_fact:
        once: "{{ ansible_play_hosts_all | length }}"
      run_once: true

    - name: Delegated to the controller
      ansible.builtin.set_fact:
        delegated: true
      delegate_to: localhost

    - name: End h2 here
      ansible.builtin.meta: end_host
      when: inventory_hostname == 'h2'

    - name: Fail h1 for real
      ansible.builtin.fail:
        msg: h1 stops here
      when: inventory_hostname == 'h1'

    - name: After the failure
      ansible.builtin.debug:
        msg: "{{ fact_a }} {{ included_fact }} {{ echo_out.stdout | default('skipped') }} {{ once }} {{ looped }}"

  handlers:
    - name: A handler
      ansible.builtin.set_fact:
        handled: true
"""

INCLUDED = """
- name: Included set_fact
  ansible.builtin.set_fact:
    included_fact: "{{ inventory_hostname }}-inc"
"""


def run(tmp_path, strategy):
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "included.yml").write_text(INCLUDED)
    # bench/callback_plugins/bench_results.py records every result by task line whatever the strategy
    # (ansible.posix.json lines results up by task start only under linear and debug).
    results_file = tmp_path / f"results-{strategy}.json"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_STRATEGY": strategy,
           "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "bench" / "callback_plugins"),
           "ANSIBLE_CALLBACKS_ENABLED": "mlplatform.gpunode.preload,bench_results",
           "BENCH_RESULTS_FILE": str(results_file)}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300, cwd=tmp_path)
    assert results_file.exists(), proc.stdout + proc.stderr
    return proc, json.loads(results_file.read_text())


def outcome(result):
    """What a user sees of a host's result: status, message, facts set, registered output."""
    return {key: result.get(key) for key in ("changed", "failed", "skipped", "msg", "stdout", "ansible_facts",
                                             "false_condition", "failed_when_result") if key in result}


def results(report):
    """``{(task name, host): outcome}`` of a recorded run, and ``{host: ppid}`` of the set_fact and of the task whose
    ``when`` only the executor makes true (the process that templated it; left out of the outcomes)."""
    out, ppid = {}, {"set_fact": {}, "magic": {}}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                facts = dict(result.get("ansible_facts") or {})
                if "ppid_set_fact" in facts:
                    ppid["set_fact"][host] = facts.pop("ppid_set_fact")
                    result = {**result, "ansible_facts": facts}
                if task["task"]["name"] == "A when only the executor's variables make true" and "stdout" in result:
                    ppid["magic"][host] = result["stdout"]
                    result = {key: value for key, value in result.items() if key != "stdout"}
                out[(task["task"]["name"], host)] = outcome(result)
    return out, ppid


def test_inline_gives_the_results_of_linear_without_a_worker_for_controller_lines(tmp_path):
    linear_proc, linear = run(tmp_path, "linear")
    inline_proc, inline = run(tmp_path, "mlplatform.gpunode.inline")
    assert linear_proc.returncode == inline_proc.returncode == 2  # h1 failed for real
    linear_results, linear_ppid = results(linear)
    inline_results, inline_ppid = results(inline)
    assert inline_results == linear_results
    assert inline["stats"] == linear["stats"]
    # The expected outcomes, so that the comparison above compares something.
    assert inline_results[("An assert that fails on h2, ignored", "h2")]["failed"] is True
    assert inline_results[("A module whose when is false on h1 only", "h1")]["skipped"] is True
    assert inline_results[("A module whose when is false on h1 only", "h3")]["stdout"] == "h3"
    assert inline_results[("A when that cannot be evaluated, ignored", "h1")]["failed"] is True
    assert inline_results[("Rescue", "h3")]["ansible_facts"] == {"rescued_here": True}
    assert inline_results[("A handler", "h3")]["ansible_facts"] == {"handled": True}
    assert ("A handler", "h2") not in inline_results
    assert inline_results[("Fail h1 for real", "h1")]["msg"] == "h1 stops here"
    assert ("After the failure", "h1") not in inline_results
    assert inline_results[("A meta with a false when", "h2")]["skipped"] is True
    assert inline_results[("End h2 here", "h3")]["skipped"] is True
    assert ("After the failure", "h2") not in inline_results
    assert inline_results[("After the failure", "h3")]["msg"] == "h3-a h3-inc h3 3 [1, 2]"
    assert inline["stats"]["h1"]["failures"] == 1 and inline["stats"]["h3"]["rescued"] == 1
    # Under linear each host's set_fact ran in a worker of its own; inline, all in ansible-playbook itself.
    assert len(set(linear_ppid["set_fact"].values())) == 3
    assert len(set(inline_ppid["set_fact"].values())) == 1
    # `ansible_host is defined` is false on the strategy's variables and true on the executor's (it adds the
    # connection's variables first): the module ran, each host in a worker of its own, not in ansible-playbook.
    assert sorted(inline_ppid["magic"]) == ["h1", "h2", "h3"]
    assert len(set(inline_ppid["magic"].values())) == 3
    assert not set(inline_ppid["magic"].values()) & set(inline_ppid["set_fact"].values())
    # A false `when` is evaluated once per host, as under linear (by the executor, not also by the strategy).
    assert inline_results[("A module whose false when counts its evaluations", "h2")]["skipped"] is True
    for strategy in ("linear", "mlplatform.gpunode.inline"):
        assert (tmp_path / f"when-evaluated-{strategy}").read_text().split() == ["x"] * 3


MEMO = """
    import json, os, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[os.path.join(os.getcwd(), ".cache", "collections")])._install()
    from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
    from ansible._internal._templating._jinja_bits import TemplateOverrides
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import compile_memo

    def render(engine, text, **kwargs):
        return engine.template(TrustedAsTemplate().tag(text), **kwargs)

    engine = TemplateEngine(variables={"a": 1, "b": [1, 2], "s": "x"})
    texts = ["{{ a + 1 }}", "{% for i in b %}{{ i }}{% endfor %}", "{{ s | upper }}", "{{ '\\\\n' }}"]
    before = [render(engine, t) for t in texts]
    cond_before = engine.evaluate_conditional(TrustedAsTemplate().tag("a == 1"))
    installed = compile_memo.install()
    first = [render(engine, t) for t in texts] + [engine.evaluate_conditional(TrustedAsTemplate().tag("a == 1"))]
    after_first = compile_memo.stats()
    second = [render(engine, t) for t in texts] + [engine.evaluate_conditional(TrustedAsTemplate().tag("a == 1"))]
    after_second = compile_memo.stats()
    # The same text under other lexer settings is another entry with its own meaning.
    brackets = TemplateOptions(overrides=TemplateOverrides(variable_start_string="[[", variable_end_string="]]"))
    other = engine.template(TrustedAsTemplate().tag("[[ a ]] {{ a }}"), options=brackets)
    plain = render(engine, "[[ a ]] {{ a }}")
    print(json.dumps({"installed": installed, "before": before + [cond_before], "first": first, "second": second,
                      "after_first": after_first, "after_second": after_second, "other": other, "plain": plain}))
"""


def _run_snippet(code, *args):
    """Run ``code`` in a fresh Python with the checkout's collections; its last line of output, as JSON."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections")}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, env=env, check=False, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_compile_memo_compiles_each_text_once_and_keeps_lexer_settings_apart():
    out = _run_snippet(MEMO)
    assert out["installed"] is True
    assert out["first"] == out["second"] == out["before"] == [2, "12", "X", "\\n", True]
    assert out["after_first"]["misses"] == 5 and out["after_first"]["hits"] == 0
    assert out["after_second"]["misses"] == 5 and out["after_second"]["hits"] == 5
    assert out["other"] == "1 {{ a }}"
    assert out["plain"] == "[[ a ]] 1"


LOOKUPS = """
    import json, os
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[os.path.join(os.getcwd(), ".cache", "collections")])._install()
    from ansible._internal._templating._engine import TemplateEngine
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible.plugins.loader import filter_loader
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import plugin_lookup_memo

    def render(text):
        # A new engine each time, as each task line has: its own environment and plugin intercepts.
        return TemplateEngine(variables={"b": [3, 1, 2]}).template(TrustedAsTemplate().tag(text))

    texts = ["{{ b | length }}", "{{ ['x_a'] | mlplatform.gpunode.unknown_variables(['x_a', 'x_b']) | length }}",
             "{{ b | sort | join(',') }}"]
    before = [render(t) for t in texts]
    installed = plugin_lookup_memo.install()
    first = [render(t) for t in texts]
    after_first = plugin_lookup_memo.stats()
    second = [render(t) for t in texts]
    after_second = plugin_lookup_memo.stats()
    errors = []
    for _ in range(2):  # a name that fails is not kept: the same error each time
        try:
            filter_loader.get("mlplatform.gpunode.no_such_filter_here.x.y")
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 -- the test reports which error
            errors.append(type(exc).__name__)
    missing = [filter_loader.get("mlplatform.gpunode.no_such_filter") for _ in range(2)]
    print(json.dumps({"installed": installed, "before": before, "first": first, "second": second,
                      "after_first": after_first, "after_second": after_second, "errors": errors,
                      "missing": [m is None for m in missing]}))
"""


def test_plugin_lookup_memo_resolves_each_filter_name_once_and_keeps_no_failure():
    out = _run_snippet(LOOKUPS)
    assert out["installed"] is True
    assert out["before"] == out["first"] == out["second"] == [3, 0, "1,2,3"]
    # length, unknown_variables, sort, join: each resolved once, then reused by the next environments.
    assert out["after_first"]["misses"] == out["after_second"]["misses"] >= 4
    assert out["after_second"]["hits"] - out["after_first"]["hits"] >= 4
    # A malformed name raises both times (not kept); a well-formed name the collection lacks is "none" both times.
    assert out["errors"][0] is not None and out["errors"] == [out["errors"][0]] * 2
    assert out["missing"] == [True, True]


CACHE = """
    import json, os, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[os.path.join(os.getcwd(), ".cache", "collections")])._install()
    from ansible._internal._templating._engine import TemplateEngine
    from ansible._internal._datatag._tags import Origin, TrustedAsTemplate
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import compile_memo

    cache, source = sys.argv[1], sys.argv[2]
    engine = TemplateEngine(variables={"a": 1, "b": [1, 2], "s": "x"})
    installed = compile_memo.install(cache)
    loaded = compile_memo.stats()
    def trusted(text):  # as a playbook's text reaches the templar: trusted, with the file it came from
        return TrustedAsTemplate().tag(Origin(path=source, line_num=1).tag(text))
    out = [engine.template(trusted(t)) for t in
           ["{{ a + 1 }}", "{% for i in b %}{{ i }}{% endfor %}", "{{ s | upper }}"]]
    out.append(engine.evaluate_conditional(trusted("a == 1")))
    print(json.dumps({"installed": installed, "loaded": loaded, "out": out, "after": compile_memo.stats()}))
"""


def _cache_run(path, source):
    return _run_snippet(CACHE, path, source)


def test_compile_cache_keeps_the_compiled_templates_across_runs_and_trusts_only_a_private_file(tmp_path):
    import marshal

    source = tmp_path / "tasks.yml"
    source.write_text("- name: a plaintext task file\n")
    cache = tmp_path / "home" / "mlplatform.gpunode" / "compile-cache"
    first = _cache_run(cache, source)
    assert first["installed"] is True and first["out"] == [2, "12", "X", True]
    assert first["loaded"]["loaded"] == 0 and first["after"]["misses"] == first["after"]["new"] == 4
    # Written when the process exited: the directory 0700, the file 0600.
    assert (cache.parent.stat().st_mode & 0o777, cache.stat().st_mode & 0o777) == (0o700, 0o600)
    written = cache.read_bytes()

    second = _cache_run(cache, source)
    assert second["out"] == first["out"]
    assert second["loaded"]["loaded"] == 4 and second["loaded"]["cache_error"] is None
    assert second["after"]["misses"] == 0 and second["after"]["hits"] == 4 and second["after"]["stale"] == 0
    assert cache.read_bytes() == written  # nothing new compiled: not written again

    # Each entry holds the filters and tests it was compiled with; one that no longer matches (here the upper
    # filter, recorded as taking the context) is compiled again, with the right result.
    with cache.open("rb") as handle:
        header, entries = marshal.load(handle), marshal.load(handle)  # noqa: S302 -- the file this test wrote
    assert [dep for _key, _code, deps in entries for dep in deps] == [("filter", "upper", None, True)]
    entries = [(key, code, tuple((k, n, "context", f) for k, n, _p, f in deps)) for key, code, deps in entries]
    cache.write_bytes(marshal.dumps(header) + marshal.dumps(entries))
    cache.chmod(0o600)
    changed = _cache_run(cache, source)
    assert changed["out"] == first["out"]
    assert changed["after"]["stale"] == 1 and changed["after"]["misses"] == 1 and changed["after"]["hits"] == 3

    # A file others can write is not trusted: compiled anew, and replaced by a private one.
    cache.chmod(0o666)
    third = _cache_run(cache, source)
    assert third["loaded"]["loaded"] == 0 and "writable by group or others" in third["loaded"]["cache_error"]
    assert third["after"]["misses"] == 4 and cache.stat().st_mode & 0o777 == 0o600

    # A link in its place is not followed.
    target = tmp_path / "elsewhere"
    cache.rename(target)
    cache.symlink_to(target)
    assert _cache_run(cache, source)["loaded"]["loaded"] == 0 and cache.is_symlink() is False
    # A file of another version, or not a cache at all, is ignored the same way.
    cache.write_bytes(marshal.dumps((0, "another python", b"", "0", "0")) + marshal.dumps([]))
    assert "another Python" in _cache_run(cache, source)["loaded"]["cache_error"]
    cache.write_bytes(marshal.dumps(_cache_header_of(written)) + b"not marshal data")
    broken = _cache_run(cache, source)
    assert broken["loaded"]["loaded"] == 0 and broken["loaded"]["cache_error"] and broken["out"] == first["out"]


def _cache_header_of(data):
    import io
    import marshal

    return marshal.load(io.BytesIO(data))  # noqa: S302 -- the file this test wrote


def test_compile_cache_never_holds_templates_of_an_encrypted_file(tmp_path):
    source = tmp_path / "secrets.yml"
    source.write_text("$ANSIBLE_VAULT;1.1;AES256\n3938\n")  # a file ansible-vault encrypted whole
    cache = tmp_path / "home" / "compile-cache"
    first = _cache_run(cache, source)
    assert first["out"] == [2, "12", "X", True] and first["after"]["misses"] == 4 and first["after"]["new"] == 0
    assert not cache.exists()  # nothing that may be written: no file
    assert _cache_run(cache, source)["after"]["misses"] == 4


def test_compile_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / ".cache" / "collections"))
    from ansible_collections.mlplatform.gpunode.plugins.strategy import inline

    assert inline.compile_cache_path({"GPUNODE_COMPILE_CACHE": "off"}) is None
    assert inline.compile_cache_path({"GPUNODE_COMPILE_CACHE": ""}) is None
    assert inline.compile_cache_path({"GPUNODE_COMPILE_CACHE": str(tmp_path / "c")}) == str(tmp_path / "c")
    assert inline.compile_cache_path({}).endswith(os.path.join("mlplatform.gpunode", "compile-cache"))


SAME_LINE = """
- name: Hosts of one task line
  hosts: all
  gather_facts: false
  tasks:
    - name: Each host's old mark
      ansible.builtin.set_fact:
        mark: "old-{{ inventory_hostname }}"

    - name: Each host sets a new mark and reads h1's, in one line
      ansible.builtin.set_fact:
        mark: "new-{{ inventory_hostname }}"
        peer_saw: "{{ hostvars['h1']['mark'] }}"

    - name: A module line, registered by all
      ansible.builtin.command: echo first
      register: echoed
      changed_when: false

    - name: The others read h1's registered result in the line where h1 registers its skip
      ansible.builtin.command: echo {{ hostvars['h1']['echoed']['stdout'] | default('h1-already-replaced') }}
      register: echoed
      changed_when: false
      when: inventory_hostname != 'h1'

    - name: The play's hosts, in a line that fails h1
      ansible.builtin.set_fact:
        seen: "{{ ansible_play_hosts | join(',') }}"
      failed_when: inventory_hostname == 'h1'

    - name: Show
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }} {{ peer_saw }} {{ seen }} {{ echoed.stdout }}"
"""


def test_inline_lines_of_one_task_see_the_state_from_before_it_as_workers_do(tmp_path):
    """Inline results are handed to the strategy once every host of the task line is queued: a host's line never
    sees another host's result of the same line (a hostvars read, the failed hosts, a register), as a forked worker
    does not; on three hosts, as under linear."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "play.yml").write_text(SAME_LINE)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
           "ANSIBLE_STRATEGY": "mlplatform.gpunode.inline", "ANSIBLE_CALLBACKS_ENABLED": "mlplatform.gpunode.preload"}
    for _ in range(3):
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                              capture_output=True, text=True, env=env, check=False, timeout=300, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr  # h1 failed
        for host in ("h2", "h3"):
            assert f"msg: {host} old-h1 h1,h2,h3 first" in proc.stdout, proc.stdout
