// bf_lfsr_lane: one update lane's stochastic-rounding source, bit-exact with bitforge's golden learner
// (learner.UpdateRule, emulate_learn.lfsr_step / lfsr_leap).
//
// A 32-bit Fibonacci LFSR, shift left, new bit 0 = s31 ^ s21 ^ s1 ^ s0 (x^32 + x^22 + x^2 + x + 1, period
// 2^32 - 1). ``word`` is the low RAND_BITS bits of the state BEFORE the current sample; on ``step`` the state
// leaps RAND_BITS single steps at once (an XOR network, one clock), so consecutive samples see disjoint
// RAND_BITS-bit chunks of the lane's bit stream. The learner steps every lane on every sample that leaves its
// update stage, whether that sample learns or not, exactly as the golden model does.
// rst (synchronous) reloads SEED.
`default_nettype none
module bf_lfsr_lane #(
    parameter [31:0] SEED = 32'h1,
    parameter integer RAND_BITS = 16
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 step,
    output wire [RAND_BITS-1:0] word
);
    reg [31:0] state;

    function [31:0] leap;
        input [31:0] s;
        integer n;
        reg [31:0] v;
        begin
            v = s;
            for (n = 0; n < RAND_BITS; n = n + 1) v = {v[30:0], v[31] ^ v[21] ^ v[1] ^ v[0]};
            leap = v;
        end
    endfunction

    always @(posedge clk) begin
        if (rst) state <= SEED;
        else if (step) state <= leap(state);
    end
    assign word = state[RAND_BITS-1:0];
endmodule
`default_nettype wire
