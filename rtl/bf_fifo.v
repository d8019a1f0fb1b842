// bf_fifo: a small synchronous FIFO of 2**DEPTH_LOG2 entries with valid/ready on both sides.
//
// Used for sideband bits that travel beside a pipeline (tlast): pushed when a sample enters, popped when
// its result leaves, so order is preserved whatever the stalls. Pointers carry one extra wrap bit, the
// usual way to tell full from empty without a counter. The read is combinational from a register array
// (small FIFOs map to LUT RAM or flip-flops): out_data is valid in the cycle out_valid is, and an entry
// pushed at one edge can be popped from the next cycle on (latency 1). in_ready = not full,
// out_valid = not empty; both come from registers only. DEPTH_LOG2 >= 1.
`default_nettype none
module bf_fifo #(
    parameter integer W = 1,
    parameter integer DEPTH_LOG2 = 4
) (
    input  wire         clk,
    input  wire         rst,
    input  wire         in_valid,
    output wire         in_ready,
    input  wire [W-1:0] in_data,
    output wire         out_valid,
    input  wire         out_ready,
    output wire [W-1:0] out_data
);
    localparam integer DEPTH = 1 << DEPTH_LOG2;
    reg [W-1:0] mem [0:DEPTH-1];
    reg [DEPTH_LOG2:0] wr, rd;

    wire empty = wr == rd;
    wire full = (wr[DEPTH_LOG2] != rd[DEPTH_LOG2]) && (wr[DEPTH_LOG2-1:0] == rd[DEPTH_LOG2-1:0]);
    wire push = in_valid && !full;
    wire pop = out_ready && !empty;

    always @(posedge clk) begin
        if (rst) begin
            wr <= {(DEPTH_LOG2 + 1){1'b0}};
            rd <= {(DEPTH_LOG2 + 1){1'b0}};
        end else begin
            if (push) wr <= wr + 1'b1;
            if (pop) rd <= rd + 1'b1;
        end
    end

    always @(posedge clk) begin
        if (push) mem[wr[DEPTH_LOG2-1:0]] <= in_data;
    end

    assign in_ready = !full;
    assign out_valid = !empty;
    assign out_data = mem[rd[DEPTH_LOG2-1:0]];
endmodule
`default_nettype wire
