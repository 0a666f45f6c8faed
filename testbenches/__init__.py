"""cocotb testbenches: reusable drivers in ``common``, one module per top level."""
