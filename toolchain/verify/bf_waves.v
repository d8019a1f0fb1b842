// bitforge: the waveform dump of an Icarus run (bitforge simulate --waves, and the window kept at a failure).
// A second root module beside the design (iverilog -s bf_waves -DBF_WAVES_TOP=<top>): dumps the design's
// signals to +bf_waves=FILE from +bf_waves_from=NS nanoseconds on (0 when absent). vvp's -vcd extended
// argument makes the file a VCD.
`timescale 1ns / 1ps
module bf_waves;
    string path;
    longint from_ns;
    initial begin
        if ($value$plusargs("bf_waves=%s", path)) begin
            if (!$value$plusargs("bf_waves_from=%d", from_ns)) from_ns = 0;
            $dumpfile(path);
            #(from_ns) $dumpvars(0, `BF_WAVES_TOP);
        end
    end
endmodule
