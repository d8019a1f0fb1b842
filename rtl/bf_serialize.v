// bf_serialize: one wide word -> BEATS = ceil(WORD_W / BUS_W) narrow beats, least significant beat first,
// with tlast on the last beat of every word.
//
// The board-level top uses it so that a core with hundreds of output bits fits a chip's pins: the word is
// loaded into a shift register and leaves BUS_W bits at a time (the last beat is zero-padded above the
// word). A new word is taken in the same cycle the last beat of the previous one is accepted, so a word
// leaves every BEATS cycles when m_tready stays high (II = BEATS, latency 1 from s_valid to the first
// beat). s_ready depends on m_tready only in the cycle of the last beat.
`default_nettype none
module bf_serialize #(
    parameter integer WORD_W = 32,
    parameter integer BUS_W = 8
) (
    input  wire              clk,
    input  wire              rst,
    input  wire              s_valid,
    output wire              s_ready,
    input  wire [WORD_W-1:0] s_data,
    output wire              m_tvalid,
    input  wire              m_tready,
    output wire [BUS_W-1:0]  m_tdata,
    output wire              m_tlast
);
    localparam integer BEATS = (WORD_W + BUS_W - 1) / BUS_W;
    localparam integer PAD_W = BEATS * BUS_W;
    localparam integer CW = BEATS > 1 ? $clog2(BEATS) : 1;
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = BEATS - 1;
    /* verilator lint_on WIDTHTRUNC */

    reg busy;
    reg [CW-1:0] beat;
    reg [PAD_W-1:0] shreg;

    wire last_beat = beat == LAST;
    wire beat_done = busy && m_tready;
    assign s_ready = !busy || (m_tready && last_beat);
    wire load = s_valid && s_ready;

    wire [PAD_W-1:0] word_padded;
    generate
        if (PAD_W > WORD_W) begin : g_pad
            assign word_padded = {{(PAD_W - WORD_W){1'b0}}, s_data};
        end else begin : g_exact
            assign word_padded = s_data;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            beat <= {CW{1'b0}};
        end else if (load) begin
            busy <= 1'b1;
            beat <= {CW{1'b0}};
        end else if (beat_done) begin
            busy <= !last_beat;
            beat <= beat + 1'b1;
        end
    end

    generate
        if (BEATS > 1) begin : g_shift
            always @(posedge clk) begin
                if (load) shreg <= word_padded;
                else if (beat_done) shreg <= {{BUS_W{1'b0}}, shreg[PAD_W-1:BUS_W]};
            end
        end else begin : g_one
            always @(posedge clk) begin
                if (load) shreg <= word_padded;
            end
        end
    endgenerate

    assign m_tvalid = busy;
    assign m_tdata = shreg[BUS_W-1:0];
    assign m_tlast = last_beat;
endmodule
`default_nettype wire
