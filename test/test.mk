# test/test.mk - the test and demo entry points (included by the Makefile).
#
#   make deps    install the missing Debian packages (test/tools/install_deps.sh)
#   make test    what CI runs: deps, model, build (-Werror), install, then the
#                suites of test/run_tests.sh (SUITES="unit regress tap" picks some)
#   make run     the demo: a local cluster with opus_pg running the default
#                model, left running (test/tools/demo.sh)
#   make lint    the checks that need no server and no build: the install and
#                update scripts (test/t/040) and the documentation's links
#                (test/t/071); they also run in the TAP suite
.PHONY: deps test run lint
deps:
	test/tools/install_deps.sh

test:
	test/run_tests.sh

run:
	test/tools/demo.sh

lint:
	prove test/t/040_install_sql_lint.pl test/t/071_doc_links.pl
