# Entry points for people and CI. Everything runs inside .venv, which this
# Makefile creates and keeps in step with pyproject.toml.

PYTHON ?= python3
SIM ?= verilator
VENV := .venv
BIN := $(VENV)/bin
# Rewritten after each successful install, so a change to pyproject.toml
# (or a deleted .venv) triggers exactly one reinstall.
STAMP := $(VENV)/.fabricsim-installed
# The editable install maps only the top-level packages present when it
# ran; a package that appears later needs one reinstall to be importable.
PACKAGES := $(wildcard hdl/__init__.py sim/__init__.py testbenches/__init__.py)

# Checked here, before the proofs that make report runs first, for the
# targets that simulate (a SIM set for another tool leaves the others alone).
ifneq ($(filter report test soak bench,$(MAKECMDGOALS)),)
ifneq ($(filter-out verilator icarus,$(SIM))$(words $(SIM)),1)
  $(error SIM must be verilator or icarus, not '$(SIM)')
endif
endif
export FABRICSIM_SIM := $(SIM)
# Where builds and results go (make report BUILD=/tmp/b RESULTS=/tmp/r).
BUILD ?= build
RESULTS ?= results
# The build folder keeps each simulation's result and each passed proof
# under a key of their inputs; make report FRESH=1 simulates and proves all
# again (FRESH=0, or FRESH unset, does not).
ifneq ($(filter report prove,$(MAKECMDGOALS)),)
ifneq ($(filter-out 0 1,$(FRESH))$(word 2,$(FRESH)),)
  $(error FRESH must be 1 or 0, not '$(FRESH)')
endif
endif
FRESH_FLAG := $(if $(filter 1,$(FRESH)),--fresh)
# Seconds Yosys and nextpnr may take on one synthesis unit (make synth
# SYNTH_TIMEOUT=1800 on a slow machine); empty: fabricsim's default, 900.
SYNTH_TIMEOUT ?=
SYNTH_TIMEOUT_FLAG := $(if $(SYNTH_TIMEOUT),--timeout $(SYNTH_TIMEOUT))

.PHONY: venv report test soak prove bench synth clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(PACKAGES)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "fabricsim needs Python 3.11 or newer; run e.g. 'make PYTHON=python3.11'" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e .
	touch $@

# The proofs and the random traffic run before the report is written, so its
# verification section is current; a failure there still lets the report be
# written, then fails the target.  The random traffic runs after the
# experiments, on the simulators they built: building them itself, with three
# fabrics on two cores, it left a core idle for about a minute.
report: venv
	@status=0; $(BIN)/python -m sim.prove --build $(BUILD) --results $(RESULTS) $(FRESH_FLAG) || status=$$?; \
	  test $$status -ne 2 || exit 2; \
	  $(BIN)/fabricsim --build $(BUILD) --results $(RESULTS) run all $(FRESH_FLAG) && \
	  { $(BIN)/python -m sim.random_traffic --build $(BUILD) --results $(RESULTS) $(FRESH_FLAG) || status=$$?; } && \
	  $(BIN)/fabricsim --build $(BUILD) --results $(RESULTS) report && exit $$status

# One pytest worker per CPU; each test file stays on one worker, so a file's
# builds and shared experiment results are made once.
test: venv
	$(BIN)/pytest -q -n auto --dist loadfile --durations=25

# Random-traffic seeds 1..SOAK_SEEDS on every fabric and simulator (make
# test runs seeds 1 and 2).  pytest exits 5 when no test is marked slow;
# that is not a failure.
SOAK_SEEDS ?= 30
soak: venv
	$(BIN)/pytest -q -n auto tests/test_random.py -k arrives_intact --seeds $(SOAK_SEEDS)
	$(BIN)/pytest -q -m slow || test $$? -eq 5

# Bounded formal proofs of the arbiter, credit counter, shaper, ACK
# coalescer, registered-read FIFO, a GX plane and a mesh router; writes
# results/proofs.json.
prove: venv
	$(BIN)/python -m sim.prove --build $(BUILD) --results $(RESULTS) $(FRESH_FLAG)

# Simulated cycles per second of each fabric's top under a bare C++ Verilator
# harness, cocotb with Verilator (and Icarus when installed) and Amaranth's
# Python simulator; writes results/bench.json for the report.
bench: venv
	$(BIN)/python -m sim.bench --report-times --build $(BUILD) --results $(RESULTS)

# Every block and each fabric's small top through Yosys and nextpnr (ECP5,
# and iCE40 where a block fits), then a flit-width sweep of the TPC arbiter;
# writes results/synth.json and results/sweep/synth.tpc_arbiter.*, which the
# next `make report` (or `fabricsim report`) shows.  A block a tool failed on
# is in the table and fails the target after the sweep has run; refused
# input (exit status 2) stops it before the sweep.
synth: venv
	@status=0; $(BIN)/fabricsim --build $(BUILD) --results $(RESULTS) synth $(SYNTH_TIMEOUT_FLAG) \
	    || status=$$?; test $$status -ne 2 || exit 2; \
	  $(BIN)/fabricsim --build $(BUILD) --results $(RESULTS) sweep synth.tpc_arbiter \
	    --grid flit_bytes=16,32,64 && exit $$status

clean:
	rm -rf $(BUILD) $(RESULTS)
