# Both targets do all set-up on a fresh machine (see scripts/bootstrap.sh).
# `make demo` installs only the venv; `make test` also helm, Azurite and promtool.
.PHONY: demo test test-deep test-fast bench mutation
demo:  ## needs only Python 3.11: no root, apt-get or promtool
	scripts/bootstrap.sh --demo
	.venv/bin/gcd demo $(ARGS)
test:  ## the everyday tier: lint, types, every test not marked deep (<= 15 min on 2 cores)
	scripts/test.sh $(ARGS)
test-deep:  ## the deep tier: random seeds, soaks, larger scopes, bench smoke (docs/conventions.md)
	scripts/test.sh --deep $(ARGS)
test-fast:  ## the everyday tier without the Spark suite and the slow ones (chaos, demo runs)
	scripts/test.sh -m "not spark and not slow" $(ARGS)
bench:
	scripts/bootstrap.sh
	.venv/bin/python -m bench $(ARGS)
mutation:  ## mutation testing of watermark/core and gcd/rules (docs/conventions.md)
	.venv/bin/python scripts/mutation.py --all $(ARGS)
