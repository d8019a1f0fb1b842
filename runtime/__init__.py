"""bitforge runtimes. Now: ``formats``, the packed weight formats that ``bitforge quantize`` writes, with their
pack/unpack code. Planned: GPU kernels that read those formats, and a host runtime for deployed devices."""
