// bf_deserialize: narrow beats of BUS_W bits -> one wide word of WORD_W bits, least significant beat first.
//
// BEATS = ceil(WORD_W / BUS_W) beats make a word (the bits of the last beat above the word are ignored).
// s_tlast closes a word: normally it comes with the last beat, and m_last repeats it; a tlast on an
// earlier beat ends the word early with the missing beats read as zero, so a sender that lost count
// resynchronises at the next packet instead of shifting every later word. Beats are collected in a
// register and a finished word moves to the output register (m_valid); s_tready = !m_valid || m_ready,
// so beats stop only while a finished word waits to be taken. One word every BEATS cycles at full rate
// (II = BEATS), latency 1 from the last beat to m_valid (BEATS from the first beat).
`default_nettype none
module bf_deserialize #(
    parameter integer WORD_W = 32,
    parameter integer BUS_W = 8
) (
    input  wire              clk,
    input  wire              rst,
    input  wire              s_tvalid,
    output wire              s_tready,
    input  wire [BUS_W-1:0]  s_tdata,
    input  wire              s_tlast,
    output wire              m_valid,
    input  wire              m_ready,
    output wire [WORD_W-1:0] m_data,
    output wire              m_last
);
    localparam integer BEATS = (WORD_W + BUS_W - 1) / BUS_W;
    localparam integer PAD_W = BEATS * BUS_W;
    localparam integer CW = BEATS > 1 ? $clog2(BEATS) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = BEATS - 1;
    /* verilator lint_on WIDTHTRUNC */

    reg [CW-1:0] beat;
    reg [PAD_W-1:0] collect;  // beats so far, each at its place in the word
    reg out_valid_q, out_last_q;
    /* verilator lint_off UNUSEDSIGNAL */
    reg [PAD_W-1:0] out_q;    // the zero-padded bits above WORD_W are not output
    /* verilator lint_on UNUSEDSIGNAL */

    assign s_tready = !out_valid_q || m_ready;
    wire take = s_tvalid && s_tready;
    wire word_end = take && (beat == LAST || s_tlast);

    // The word as it stands with this beat placed at its slot (the slots above it still zero).
    reg [PAD_W-1:0] placed;
    integer k;
    always @* begin
        placed = collect;
        for (k = 0; k < BEATS; k = k + 1) begin
            if (beat == k[CW-1:0]) placed[k*BUS_W +: BUS_W] = s_tdata;
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            beat <= {CW{1'b0}};
            collect <= {PAD_W{1'b0}};
            out_valid_q <= 1'b0;
            out_last_q <= 1'b0;
        end else begin
            if (m_ready) out_valid_q <= 1'b0;
            if (take) begin
                if (word_end) begin
                    beat <= {CW{1'b0}};
                    collect <= {PAD_W{1'b0}};
                    out_valid_q <= 1'b1;
                    out_last_q <= s_tlast;
                end else begin
                    beat <= beat + 1'b1;
                    collect <= placed;
                end
            end
        end
    end

    always @(posedge clk) begin
        if (word_end) out_q <= placed;
    end

    assign m_valid = out_valid_q;
    assign m_data = out_q[WORD_W-1:0];
    assign m_last = out_last_q;
endmodule
`default_nettype wire
