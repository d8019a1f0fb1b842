// bf_permute: a wiring stage, out element i = in element PERM[i] (Reshape: the identity; Transpose: the
// permutation of the C-order elements that the axis permutation makes). No logic and no register: valid,
// ready and data pass straight through, so it adds no cycle (latency 0) and the RTL generator's skid buffer
// after it is the only register. PERM packs each source index in IW bits at [i*IW +: IW]; IDENTITY = 1 ignores
// it (a Reshape of a large tensor then needs no N-entry parameter).
`default_nettype none
module bf_permute #(
    parameter integer N = 2,
    parameter integer W = 8,
    parameter integer IW = 1,
    parameter [N*IW-1:0] PERM = 2'b01,  // the default swaps the two elements
    parameter integer IDENTITY = 0
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire           clk,  // a wire stage keeps the stage ports
    input  wire           rst,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire           in_valid,
    output wire           in_ready,
    input  wire [N*W-1:0] in_data,
    output wire           out_valid,
    input  wire           out_ready,
    output wire [N*W-1:0] out_data
);
    assign out_valid = in_valid;
    assign in_ready = out_ready;
    genvar i;
    generate
        if (IDENTITY != 0) begin : g_identity
            assign out_data = in_data;
        end else begin : g_permute
            for (i = 0; i < N; i = i + 1) begin : g_elem
                /* verilator lint_off WIDTHEXPAND */
                localparam integer S = PERM[i*IW +: IW];
                /* verilator lint_on WIDTHEXPAND */
                assign out_data[i*W +: W] = in_data[S*W +: W];
            end
        end
    endgenerate
endmodule
`default_nettype wire
