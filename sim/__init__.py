"""Build cache, cocotb runner, experiments, fits and reports for fabricsim."""
