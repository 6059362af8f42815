# Two commands from a fresh clone: `make run` and `make test`. Each sets up the venv it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check lint soak bench bench-big clean venv browser-deps node-deps i18n openapi new-channel

$(STAMP): requirements-dev.txt layers/common/requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m tally_local.stack

test: $(STAMP) browser-deps node-deps
	$(BIN)/ruff check layers functions tally_local tally_cli tests bench
	$(BIN)/ruff format --check layers functions tally_local tally_cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 2 --dist loadfile tests

# make check: the fast lane (docs/gates.md): every gate of make lint, then the unit, integration, security and
# concurrency tests without the long ones (the simulated days tests/sim, e2e, fuzz; tests marked slow).
# make test stays the full gate (CI).
check: lint node-deps
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not e2e" tests/unit tests/integration tests/security tests/concurrency

# make soak: 10,000 seeded micro days + 100,000 fuzz inputs, one table (docs/proof.md), bounded by MINUTES
# (default 55: the days stop at 3/4 of it, the fuzz at the end; the table says what ran; MINUTES=0: no bound).
# make soak SEED=123 replays one day; SEEDS=, SHAPE=tiny|small, FUZZ=, MINUTES= size it.
# Then 10,000 work-queue items replayed by two bulk replay runs at once, the ledger checked (docs/morning.md).
# Then the upgrade-under-fault days: DEPLOYS seeds (default 250), each as an upgrade (previous release → current)
# and a rollback, both releases serving mid-day (tests/sim/upgrade.py; needs the previous release's commit).
soak: $(STAMP)
	$(BIN)/python -m tests.sim.run $(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),10000) --fuzz $(or $(FUZZ),100000) --max-minutes $(or $(MINUTES),55)) $(if $(SHAPE),--shape $(SHAPE))
	$(BIN)/python -m tests.sim.run --deploys $(or $(DEPLOYS),250)
	TALLY_REPLAY_SOAK=1 $(BIN)/python -m pytest -q -s -n 0 -p no:randomly -k 10000 tests/integration/test_bulk_replay_sim.py

bench: $(STAMP)
	$(BIN)/python -m bench.run

# a 10,000,000-row bill through the partitioned recon path, next to the 1M in-memory path (~9 GB of /tmp)
bench-big: $(STAMP)
	$(BIN)/python -m bench.recon_10m

# lint: style, formatting, types (mypy on the layer and the CLI, [tool.mypy]) and the import contracts (.importlinter)
lint: $(STAMP)
	$(BIN)/ruff check layers functions tally_local tally_cli tests bench
	$(BIN)/ruff format --check layers functions tally_local tally_cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# make openapi: docs/openapi.json and docs/errors.md from the API models and error codes (tally/api/);
# tests/unit/test_api_reference.py fails when the committed files and the code disagree.
openapi: $(STAMP)
	$(BIN)/python -m tally.api.openapi .

# make new-channel NAME=unionpay LABEL="UnionPay": a channel package, its simulator desk and one registry line from
# tally_local/channel_template (docs/new-channel.md); tests/integration/test_new_channel.py counts what it touches.
new-channel: $(STAMP)
	@test -n "$(NAME)" || { echo 'make new-channel NAME=<package name> [LABEL="<what people read>"]'; exit 2; }
	$(BIN)/python -m tally_local.new_channel "$(NAME)" --label "$(LABEL)"

clean:
	rm -rf $(VENV) .tally .pytest_cache

# The console's browser tests (tests/browser/) drive Debian's packaged Chromium: installed with apt-get when
# missing (needs root, as in CI); otherwise this fails loudly with the command to run.
browser-deps:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	  else echo "Chromium is missing: sudo apt-get update && sudo apt-get install -y chromium chromium-driver" >&2; exit 1; fi; }
	@test -x /usr/bin/chromium || { echo "Chromium did not install: the browser tests cannot run" >&2; exit 1; }

# node-deps: Node and the npm packages of examples/node (the AWS SDK's SigV4 signer), which the tests run; the
# packages at the versions of its package-lock.json, fetched once (an install, like the venv's).
EXAMPLE_NODE := examples/node/node_modules/.package-lock.json
node-deps: $(EXAMPLE_NODE)
$(EXAMPLE_NODE): examples/node/package-lock.json
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm; \
	  else echo "Node is missing: sudo apt-get update && sudo apt-get install -y nodejs npm" >&2; exit 1; fi; }
	npm ci --prefix examples/node --no-audit --no-fund --loglevel=error
	touch $(EXAMPLE_NODE)

# make docs-picture: docs/architecture.svg from docs/architecture.dot (graphviz `dot`; apt-get install graphviz).
# tests/unit/test_architecture_picture.py checks the committed SVG against the source without graphviz.
.PHONY: docs-picture
docs-picture:
	@command -v dot >/dev/null || { echo "graphviz is missing: sudo apt-get install -y graphviz" >&2; exit 1; }
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

# make i18n: the catalogues (docs/language.md), two gettext domains: `tally` (the console and the reasons every
# surface shares: Python + the console's Jinja2 templates, babel.cfg) and `tally_cli` (the CLI's own sentences,
# babel_cli.cfg). Extract each into its .pot, merge it into each language's .po, compile the .mo files
# (committed: the Lambda layer needs no build step). tests/unit/test_i18n_catalogues.py and
# tests/unit/test_cli_catalogue.py fail on a missing translation.
LOCALES := layers/common/tally/locale
i18n: $(STAMP)
	$(BIN)/pybabel -q extract -F $(LOCALES)/babel.cfg --no-location --sort-output --project Tally -o $(LOCALES)/tally.pot .
	$(BIN)/pybabel -q extract -F $(LOCALES)/babel_cli.cfg --no-location --sort-output --project Tally -o $(LOCALES)/tally_cli.pot .
	for domain in tally tally_cli; do \
	  for lang in zh_CN en; do \
	    test -f $(LOCALES)/$$lang/LC_MESSAGES/$$domain.po || $(BIN)/pybabel -q init -D $$domain -i $(LOCALES)/$$domain.pot -d $(LOCALES) -l $$lang; \
	    $(BIN)/pybabel -q update -D $$domain -i $(LOCALES)/$$domain.pot -d $(LOCALES) -l $$lang --no-fuzzy-matching --ignore-obsolete; \
	  done; \
	  $(BIN)/pybabel -q compile -D $$domain -d $(LOCALES) --statistics; \
	done
