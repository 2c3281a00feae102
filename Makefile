# The README's two commands, and the rest of the set-up's. Each target is scripts/bootstrap.py, which runs without
# make too (Windows: py scripts\bootstrap.py course). It sets up .venv the first time (and repairs it when needed),
# then does the target's work; its docstring says each step.
#
#   make course        set up, then open your own copy of the course in JupyterLab (ARGS="-- --no-browser" ...)
#   make test          set up with the test extras, then the README's test command
#   make test-bf16     the notebooks in bfloat16 (the second test tier)
#   make site          the executed course, glossary and docs as an offline static web site in build/site
#   make lock          refresh constraints.txt with the newest versions pyproject.toml allows (then: make test)
#
# PYTHON picks the interpreter that creates .venv (make course PYTHON=python3.12).
PYTHON ?= python3
ARGS ?=

.PHONY: course test test-bf16 site lock
course test test-bf16 site lock:
	@$(PYTHON) scripts/bootstrap.py $@ $(ARGS)
