"""RTL backend: IR -> synthesizable Verilog-2005 that instantiates the hand-written ``rtl/`` library.

``stages`` is the contract with the per-op emitters; ``generate`` chains the stages into a top module.
"""
