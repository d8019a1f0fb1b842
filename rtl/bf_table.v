// bf_table: a stream stage looking up a table per element, fully parallel (the Table op, tables.lookup).
//
// Element i goes through its own bf_table_rom (index clamp((x - INDEX_LO) >> SHIFT, 0, ENTRIES - 1), ROM read
// into a register): N ROMs of ENTRIES x Y_W bits, one lookup per element per clock. The ROM's read register is
// the output register. For large tensors bf_table_folded shares a ROM among R elements. Latency 1, II 1.
`default_nettype none
module bf_table #(
    parameter integer N = 2,
    parameter integer X_W = 8,
    parameter integer X_SIGNED = 1,
    parameter integer LO_W = 8,
    parameter [LO_W-1:0] INDEX_LO = {LO_W{1'b0}},
    parameter integer SHIFT = 0,
    parameter integer ENTRIES = 4,
    parameter integer Y_W = 8,
    parameter [ENTRIES*Y_W-1:0] TABLE = {ENTRIES*Y_W{1'b0}}
) (
    input  wire             clk,
    input  wire             rst,
    input  wire             in_valid,
    output wire             in_ready,
    input  wire [N*X_W-1:0] in_data,
    output wire             out_valid,
    input  wire             out_ready,
    output wire [N*Y_W-1:0] out_data
);
    wire ce;
    bf_pipe_valid #(.LATENCY(1)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            bf_table_rom #(.X_W(X_W), .X_SIGNED(X_SIGNED), .LO_W(LO_W), .INDEX_LO(INDEX_LO), .SHIFT(SHIFT),
                           .ENTRIES(ENTRIES), .Y_W(Y_W), .TABLE(TABLE))
                u_rom (.clk(clk), .ce(ce), .x(in_data[i*X_W +: X_W]), .y(out_data[i*Y_W +: Y_W]));
        end
    endgenerate
endmodule
`default_nettype wire
