// bf_table_folded: bf_table with reuse factor R: R elements share a ROM, one lookup per ROM per clock, II R.
//
// Bit-exact with tables.lookup, as bf_table. L = ceil(N / R) lanes, each a bf_table_rom serving elements
// j*R .. j*R + R - 1 (the last lane's places past N hold zeros, looked up and never output).
// Schedule, as bf_dense_folded's: a sample is accepted into `rot` (while idle, or in the previous sample's
// last issue cycle, so II is exactly R); in issue cycle c = 0 .. R-1 each lane's chunk of `rot` has rotated
// c places, so its place 0 holds element j*R + c (no input multiplexer); the ROM register takes that entry
// and, a cycle later, it shifts into the lane's part of `col`, which after R shifts holds the lane's elements
// in order and is the output register. Every register loads on advance = !out_valid || out_ready, so a result
// waits, and the work behind it stalls, until it is taken. Latency R + 2 (the accept cycle, R issue cycles,
// the last shift), II R.
`default_nettype none
module bf_table_folded #(
    parameter integer N = 5,
    parameter integer R = 2,
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
    localparam integer L = (N + R - 1) / R;
    localparam integer PAD = L * R - N;
    localparam integer CW = $clog2(R);  // R >= 2
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = R - 1;
    /* verilator lint_on WIDTHTRUNC */

    wire advance = !out_valid || out_ready;
    reg busy;
    reg [CW-1:0] c;
    assign in_ready = advance && (!busy || c == LAST);
    wire accept = in_valid && in_ready;
    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            c <= {CW{1'b0}};
        end else if (advance) begin
            if (accept) begin
                busy <= 1'b1;
                c <= {CW{1'b0}};
            end else if (busy) begin
                busy <= c != LAST;
                c <= c + 1'b1;
            end
        end
    end

    wire [L*R*X_W-1:0] loaded;
    generate
        if (PAD > 0) begin : g_pad
            assign loaded = {{(PAD*X_W){1'b0}}, in_data};
        end else begin : g_no_pad
            assign loaded = in_data;
        end
    endgenerate

    // The lookups of issue cycle c are in the ROM registers a cycle later: `taken` says so, `done` marks the
    // last of a sample.
    reg taken, done, y_valid;
    always @(posedge clk) begin
        if (rst) begin
            taken <= 1'b0;
            done <= 1'b0;
            y_valid <= 1'b0;
        end else if (advance) begin
            taken <= busy;
            done <= busy && c == LAST;
            y_valid <= done;
        end
    end
    assign out_valid = y_valid;

    /* verilator lint_off UNUSEDSIGNAL */
    wire [L*R*Y_W-1:0] col;  // the last lane's padding places are never output
    /* verilator lint_on UNUSEDSIGNAL */
    genvar j;
    generate
        for (j = 0; j < L; j = j + 1) begin : g_lane
            localparam integer B = j * R * X_W;
            reg [R*X_W-1:0] rot;
            always @(posedge clk) begin
                if (advance) begin
                    if (accept) rot <= loaded[B +: R*X_W];
                    else if (busy) rot <= {rot[X_W-1:0], rot[R*X_W-1:X_W]};
                end
            end
            wire [Y_W-1:0] y;
            bf_table_rom #(.X_W(X_W), .X_SIGNED(X_SIGNED), .LO_W(LO_W), .INDEX_LO(INDEX_LO), .SHIFT(SHIFT),
                           .ENTRIES(ENTRIES), .Y_W(Y_W), .TABLE(TABLE))
                u_rom (.clk(clk), .ce(advance), .x(rot[X_W-1:0]), .y(y));
            reg [R*Y_W-1:0] lane_col;
            always @(posedge clk) if (advance && taken) lane_col <= {y, lane_col[R*Y_W-1:Y_W]};
            assign col[j*R*Y_W +: R*Y_W] = lane_col;
        end
    endgenerate
    assign out_data = col[N*Y_W-1:0];
endmodule
`default_nettype wire
