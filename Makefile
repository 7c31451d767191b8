# mlplatform.gpunode — the two commands a new user needs:
#   make demo   start a simulated DGX + HGX fleet and run the pipeline against it
#   make test   lint, unit tests and molecule (what CI runs through .ci/run)
# Everything the targets need is installed by the targets themselves (as root on Debian 12):
# podman, runc and debootstrap from apt, a venv with the Python tools and the `ansible` package
# (collections; there is no Galaxy here), and the test-host image built with debootstrap.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
VENV ?= $(ROOT)/.venv
PYTHON ?= python3
STAMPS := $(ROOT)/.cache/stamps
COLLECTION_LINK := $(ROOT)/.cache/collections/ansible_collections/mlplatform/gpunode

export PATH := $(VENV)/bin:$(PATH):/usr/sbin:/sbin
export CONTAINERS_CONF ?= $(ROOT)/src/gpunode/sim/image/containers.conf
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(ROOT)/.cache/collections
# ansible-lint puts $ANSIBLE_HOME/collections first; a per-checkout home keeps it from resolving
# mlplatform.gpunode to a stale copy installed in ~/.ansible by another checkout.
export ANSIBLE_HOME := $(ROOT)/.cache/ansible-home
export ANSIBLE_FORCE_COLOR ?= 0
export GPUNODE_SIM_DIR ?= $(ROOT)/.sim
export PY_COLORS ?= 0

APT_PACKAGES := podman runc debootstrap tar
DEMO_HOSTS ?= dgx01=dgx-h100 hgx01=hgx-h100
DEMO_NAMES = $(foreach h,$(DEMO_HOSTS),$(firstword $(subst =, ,$(h))))
DEMO_REPORT ?= $(GPUNODE_SIM_DIR)/report
# The demo's Kubernetes API emulator (validate/demo port range 18600-18699).
DEMO_KAPI_PORT ?= 18643
# One line per molecule scenario, run in this order by `make molecule`.
SCENARIOS :=
SCENARIOS += install
SCENARIOS += mixed_fabric
SCENARIOS += qos
SCENARIOS += join

# The playbook the hook's end-to-end test runs (playbooks/site.yml once the full pipeline is on main).

.PHONY: e2e help deps system-deps browser venv collection image lint unit molecule test demo demo-down bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

system-deps: $(STAMPS)/system-deps ## podman, runc, debootstrap from apt (root)
$(STAMPS)/system-deps:
	@mkdir -p $(STAMPS)
	@missing=""; for bin in podman runc debootstrap; do command -v $$bin >/dev/null || missing="$$missing $$bin"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing from apt:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \
	  apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	@touch $@

# Headless Chromium for the fleet report's browser test (tests/unit/test_report_browser.py loads a
# 256-host report with --dump-dom); Debian's chromium package, without its recommends.
browser: $(STAMPS)/browser ## chromium from apt (root), for the report's browser test
$(STAMPS)/browser:
	@mkdir -p $(STAMPS)
	@if ! command -v chromium >/dev/null; then \
	  echo "installing from apt: chromium"; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \
	  apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi
	@touch $@

venv: $(STAMPS)/venv ## the Python venv with the project and its dev tools
$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) || { \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq python3-venv >/dev/null; \
	  rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $@

collection: $(COLLECTION_LINK) ## make the repo importable as mlplatform.gpunode
$(COLLECTION_LINK):
	@mkdir -p $(dir $@)
	@ln -sfn $(ROOT) $@

deps: system-deps venv collection

image: deps ## build the simulated hosts' image (cached by recipe)
	gpunode sim image

lint: deps ## yamllint, ansible-lint (production profile), ruff, antsibull-changelog lint
	yamllint --strict .
	ansible-lint
	ruff check src plugins tests molecule bench
	antsibull-changelog lint

# The collection supports ansible-core 2.19 and newer (meta/runtime.yml). The dev venv holds the oldest (the
# `ansible` 12 package pins 2.19) and runs every stage; the newest runs in a venv of its own with the Python it
# needs (2.20 and newer need 3.12 or newer: the machine's pyenv, else one on PATH): sanity and the plugin unit tests.
CORES := 2.21
CORE_PYTHON_2.21 := $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3)),python3.13)
# The unit tests of the collection's plugins (modules, module_utils, action plugins, filters): no playbook run,
# no simulated host, nothing from the dev venv but pytest.
PLUGIN_TESTS := $(shell cat tests/unit/plugin_tests.txt)

core-venv-%: $(STAMPS)/core-% # a venv with ansible-core $* (make core-venv-2.21)
	@:
# The stamp is made through a pattern rule: without this, make deletes it as an intermediate file, and the next
# stage builds the venv again.
.PRECIOUS: $(STAMPS)/core-%
$(STAMPS)/core-%: pyproject.toml
	@mkdir -p $(STAMPS)
	rm -rf $(ROOT)/.cache/core-$*
	$(CORE_PYTHON_$*) -m venv $(ROOT)/.cache/core-$*
	$(ROOT)/.cache/core-$*/bin/python -m pip install -q -e '.[sim,plugin-tests]' 'ansible-core==$*.*'
	@touch $@

.PHONY: sanity
sanity: deps ## ansible-test sanity on the built collection with the dev venv's ansible-core (offline, no ignore file; see .ci/sanity)
	.ci/sanity

sanity-%: deps core-venv-% # ansible-test sanity with ansible-core $* (make sanity-2.21)
	VENV=$(ROOT)/.cache/core-$* .ci/sanity

# pytest-xdist workers for `make unit` (auto: one per core); loadfile keeps a module's tests, and so
# its module-scoped fixtures (materialized trees, playbook runs, API emulators), on one worker. The files go out
# in collection order, the ones marked slow first (tests/unit/conftest.py), not reordered by their number of
# tests (xdist's default puts the few-test playbook files last, and one worker ends the run alone on them).
PYTEST_WORKERS ?= auto

unit: deps browser ## pytest unit and conformance tests, on every core
	pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 tests/unit

# Workers for the newest ansible-core's plugin unit tests: one, as `make test` runs them beside molecule and e2e.
CORE_PYTEST_WORKERS ?= 1

unit-%: deps core-venv-% # the plugin unit tests with ansible-core $* (make unit-2.21)
	env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH $(ROOT)/.cache/core-$*/bin/python -m pytest -q -p no:cacheprovider \
	  -n $(CORE_PYTEST_WORKERS) --dist loadfile $(PLUGIN_TESTS)

molecule: image ## molecule scenarios on simulated hosts
	@for s in $(SCENARIOS); do molecule test -s $$s || exit 1; done

molecule-%: image # one molecule scenario, e.g. make molecule-qos
	molecule test -s $*

e2e: image ## end-to-end tests on simulated hosts (the hook driven by real cloud-init)
	pytest -q -m e2e tests/e2e

# The stages `make test` runs in this order; .ci/stages prints each one's wall time at the end
# (also when one fails) and writes them to .cache/stage-times.tsv.
# Stages that need no simulated host and no port of their own run in the background (.ci/stages bg:) where a core
# is idle: ansible-test sanity keeps about one core busy, beside ansible-lint, which keeps one; the newest
# ansible-core's sanity and plugin unit tests (one worker), one after the other, beside molecule and e2e, which
# leave about a third of the 2-core machine idle while they wait on their simulated hosts.
comma := ,
empty :=
space := $(empty) $(empty)
NEWEST_STAGES = $(subst $(space),$(comma),$(strip $(foreach c,$(CORES),sanity-$(c) unit-$(c))))
TEST_STAGES = bg:sanity lint unit image bg:$(NEWEST_STAGES) $(addprefix molecule-,$(SCENARIOS)) e2e

test: deps ## everything CI runs (lint, sanity, unit, each molecule scenario, e2e), with per-stage wall times
	@MAKE="$(MAKE)" .ci/stages $(TEST_STAGES)

demo: image ## start a DGX + HGX simulated fleet, run playbooks/site.yml end to end, write the fleet report
	gpunode sim up $(DEMO_HOSTS)
	gpunode sim inventory -o inventories/sim/hosts.yml $(DEMO_NAMES)
	gpunode kapi start --port $(DEMO_KAPI_PORT) --state $(GPUNODE_SIM_DIR)/kapi
	ansible-playbook playbooks/sim_cluster.yml -e '{"gpunode_sim_kapi_port": $(DEMO_KAPI_PORT)}'
	@rc=0; GPUNODE_REPORT_DIR=$(DEMO_REPORT) ansible-playbook -i inventories/sim/hosts.yml playbooks/site.yml \
	  -e @$(GPUNODE_SIM_DIR)/kapi/site-vars.yml -e '{"gpunode_reboot_ok": true}' || rc=$$?; \
	echo "Fleet report: $(DEMO_REPORT)/report.html (Markdown: $(DEMO_REPORT)/report.md)"; \
	echo "The fleet keeps running: 'make demo-down' removes it."; exit $$rc

demo-down: deps ## remove the demo fleet
	gpunode sim down --missing-ok $(DEMO_NAMES)
	-gpunode kapi stop --state $(GPUNODE_SIM_DIR)/kapi

bench: deps ## benchmarks; writes BENCHMARKS.md
	python bench/bench_discovery.py --output BENCHMARKS.md
	python bench/bench_hook.py --output BENCHMARKS.md
	python bench/bench_fleet.py --output BENCHMARKS.md
	python bench/bench_intent.py --output BENCHMARKS.md
	python bench/bench_site.py --output BENCHMARKS.md

clean: ## remove the venv, caches and simulated hosts
	-gpunode sim down
	rm -rf $(VENV) .cache .sim
