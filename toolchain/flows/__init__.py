"""Implementation flows: yosys synthesis, nextpnr place and route, bitstream packers, target database."""
