// bf_pipe_valid: the stall control of a LATENCY-deep pipeline whose registers all load together.
//
// Every data register of the pipeline loads when ce is high, ce = !out_valid || out_ready: the whole pipeline
// advances unless a finished result waits to be taken, so out_data (the last register) holds while stalled,
// as stages.py asks. in_ready = ce. valid is a LATENCY-bit shift register beside the data; only it is reset.
// This is the control bf_kan_layer spells inline; the element-wise stages (bf_scale_shift, bf_leaky_relu,
// bf_clip, bf_hard_sigmoid, bf_table, bf_softmax, bf_argmax) share it. Latency LATENCY (>= 1), II 1.
`default_nettype none
module bf_pipe_valid #(
    parameter integer LATENCY = 1
) (
    input  wire clk,
    input  wire rst,
    input  wire in_valid,
    output wire in_ready,
    output wire out_valid,
    input  wire out_ready,
    output wire ce
);
    assign ce = !out_valid || out_ready;
    assign in_ready = ce;
    reg [LATENCY-1:0] valid;
    generate
        if (LATENCY > 1) begin : g_chain
            always @(posedge clk) begin
                if (rst) valid <= {LATENCY{1'b0}};
                else if (ce) valid <= {valid[LATENCY-2:0], in_valid};
            end
        end else begin : g_one
            always @(posedge clk) begin
                if (rst) valid <= 1'b0;
                else if (ce) valid <= in_valid;
            end
        end
    endgenerate
    assign out_valid = valid[LATENCY-1];
endmodule
`default_nettype wire
