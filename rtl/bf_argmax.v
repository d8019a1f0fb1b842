// bf_argmax: a stream stage giving, per group of K codes, the index of the largest (the first one on ties),
// as the ArgMax op's golden rule (numpy argmax over the last axis).
//
// in_data holds G groups of K codes (group g: elements g*K .. g*K + K - 1, the last axis of a C-order tensor);
// out_data holds G indices of OUT_W bits (validate guarantees the output type ufixed<B,B> holds K - 1).
// One bf_argmax_tree per group, then the output register. Latency 1, II 1.
`default_nettype none
module bf_argmax #(
    parameter integer G = 1,
    parameter integer K = 4,
    parameter integer X_W = 8,
    parameter integer X_SIGNED = 1,
    parameter integer OUT_W = 2
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               in_valid,
    output wire               in_ready,
    input  wire [G*K*X_W-1:0] in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [G*OUT_W-1:0] out_data
);
    localparam integer IW = K > 1 ? $clog2(K) : 1;
    wire ce;
    bf_pipe_valid #(.LATENCY(1)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar g;
    generate
        for (g = 0; g < G; g = g + 1) begin : g_group
            /* verilator lint_off UNUSEDSIGNAL */
            wire [X_W-1:0] top;  // only the index is output
            /* verilator lint_on UNUSEDSIGNAL */
            wire [IW-1:0] index;
            bf_argmax_tree #(.N(K), .W(X_W), .SIGNED(X_SIGNED), .IW(IW))
                u_tree (.in_data(in_data[g*K*X_W +: K*X_W]), .max(top), .index(index));
            // OUT_W >= the index's bits (validate); a wider output gets zeros on top.
            wire [OUT_W-1:0] y;
            if (OUT_W > IW) begin : g_widen
                assign y = {{(OUT_W - IW){1'b0}}, index};
            end else begin : g_same
                assign y = index;
            end
            reg [OUT_W-1:0] y_q;
            always @(posedge clk) if (ce) y_q <= y;
            assign out_data[g*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
