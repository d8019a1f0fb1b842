// Simulation models of the two ECP5 hard blocks that yosys's share folder only declares: DP16KD (a black
// box in ecp5/cells_sim.v) and MULT18X18D (ecp5/cells_bb.v). With them a synthesised ECP5 netlist runs in
// Icarus beside ecp5/cells_sim.v's own models of every other cell (bitforge simulate --netlist).
//
// Only modes that yosys's mapping rules produce are modelled: lattice/dsp_map_18x18.v makes a combinational
// 18x18 multiply (no register, SOURCEA/B 0, C unused); lattice/brams_map_16kd.v makes DP16KD a true dual port
// RAM of 9 or 18 bits per port (1, 2 and 4 are not modelled) or a pseudo dual port x36 (write on A, read on
// B), without the output register. Any other parameter stops the simulation with $fatal instead of
// simulating something else. Memory rows are 18 bits: INITVAL_xx holds rows 16*xx .. 16*xx+15 at
// [i*20 +: 18] (brams_map_16kd.v's init_slice); a x18 port addresses row AD[13:4] with byte enables AD[1:0]
// on writes, a x9 port the half AD[3] of row AD[13:4], a x36 word k is rows 2k (DOA, low) and 2k+1 (DOB).
// Port names, declarations and parameter defaults are copied from those files (yosys 0.70).
`timescale 1ns / 1ps

module DP16KD(
  input DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
  input ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
  input CEA, OCEA, CLKA, WEA, RSTA,
  input CSA2, CSA1, CSA0,
  output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,

  input DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
  input ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
  input CEB, OCEB, CLKB, WEB, RSTB,
  input CSB2, CSB1, CSB0,
  output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
	parameter DATA_WIDTH_A = 18;
	parameter DATA_WIDTH_B = 18;
	parameter REGMODE_A = "NOREG";
	parameter REGMODE_B = "NOREG";
	parameter RESETMODE = "SYNC";
	parameter ASYNC_RESET_RELEASE = "SYNC";
	parameter CSDECODE_A = "0b000";
	parameter CSDECODE_B = "0b000";
	parameter WRITEMODE_A = "NORMAL";
	parameter WRITEMODE_B = "NORMAL";
	parameter DIA17MUX = "DIA17";
	parameter DIA16MUX = "DIA16";
	parameter DIA15MUX = "DIA15";
	parameter DIA14MUX = "DIA14";
	parameter DIA13MUX = "DIA13";
	parameter DIA12MUX = "DIA12";
	parameter DIA11MUX = "DIA11";
	parameter DIA10MUX = "DIA10";
	parameter DIA9MUX = "DIA9";
	parameter DIA8MUX = "DIA8";
	parameter DIA7MUX = "DIA7";
	parameter DIA6MUX = "DIA6";
	parameter DIA5MUX = "DIA5";
	parameter DIA4MUX = "DIA4";
	parameter DIA3MUX = "DIA3";
	parameter DIA2MUX = "DIA2";
	parameter DIA1MUX = "DIA1";
	parameter DIA0MUX = "DIA0";
	parameter ADA13MUX = "ADA13";
	parameter ADA12MUX = "ADA12";
	parameter ADA11MUX = "ADA11";
	parameter ADA10MUX = "ADA10";
	parameter ADA9MUX = "ADA9";
	parameter ADA8MUX = "ADA8";
	parameter ADA7MUX = "ADA7";
	parameter ADA6MUX = "ADA6";
	parameter ADA5MUX = "ADA5";
	parameter ADA4MUX = "ADA4";
	parameter ADA3MUX = "ADA3";
	parameter ADA2MUX = "ADA2";
	parameter ADA1MUX = "ADA1";
	parameter ADA0MUX = "ADA0";
	parameter CEAMUX = "CEA";
	parameter OCEAMUX = "OCEA";
	parameter CLKAMUX = "CLKA";
	parameter WEAMUX = "WEA";
	parameter RSTAMUX = "RSTA";
	parameter CSA2MUX = "CSA2";
	parameter CSA1MUX = "CSA1";
	parameter CSA0MUX = "CSA0";
	parameter DOA17MUX = "DOA17";
	parameter DOA16MUX = "DOA16";
	parameter DOA15MUX = "DOA15";
	parameter DOA14MUX = "DOA14";
	parameter DOA13MUX = "DOA13";
	parameter DOA12MUX = "DOA12";
	parameter DOA11MUX = "DOA11";
	parameter DOA10MUX = "DOA10";
	parameter DOA9MUX = "DOA9";
	parameter DOA8MUX = "DOA8";
	parameter DOA7MUX = "DOA7";
	parameter DOA6MUX = "DOA6";
	parameter DOA5MUX = "DOA5";
	parameter DOA4MUX = "DOA4";
	parameter DOA3MUX = "DOA3";
	parameter DOA2MUX = "DOA2";
	parameter DOA1MUX = "DOA1";
	parameter DOA0MUX = "DOA0";
	parameter DIB17MUX = "DIB17";
	parameter DIB16MUX = "DIB16";
	parameter DIB15MUX = "DIB15";
	parameter DIB14MUX = "DIB14";
	parameter DIB13MUX = "DIB13";
	parameter DIB12MUX = "DIB12";
	parameter DIB11MUX = "DIB11";
	parameter DIB10MUX = "DIB10";
	parameter DIB9MUX = "DIB9";
	parameter DIB8MUX = "DIB8";
	parameter DIB7MUX = "DIB7";
	parameter DIB6MUX = "DIB6";
	parameter DIB5MUX = "DIB5";
	parameter DIB4MUX = "DIB4";
	parameter DIB3MUX = "DIB3";
	parameter DIB2MUX = "DIB2";
	parameter DIB1MUX = "DIB1";
	parameter DIB0MUX = "DIB0";
	parameter ADB13MUX = "ADB13";
	parameter ADB12MUX = "ADB12";
	parameter ADB11MUX = "ADB11";
	parameter ADB10MUX = "ADB10";
	parameter ADB9MUX = "ADB9";
	parameter ADB8MUX = "ADB8";
	parameter ADB7MUX = "ADB7";
	parameter ADB6MUX = "ADB6";
	parameter ADB5MUX = "ADB5";
	parameter ADB4MUX = "ADB4";
	parameter ADB3MUX = "ADB3";
	parameter ADB2MUX = "ADB2";
	parameter ADB1MUX = "ADB1";
	parameter ADB0MUX = "ADB0";
	parameter CEBMUX = "CEB";
	parameter OCEBMUX = "OCEB";
	parameter CLKBMUX = "CLKB";
	parameter WEBMUX = "WEB";
	parameter RSTBMUX = "RSTB";
	parameter CSB2MUX = "CSB2";
	parameter CSB1MUX = "CSB1";
	parameter CSB0MUX = "CSB0";
	parameter DOB17MUX = "DOB17";
	parameter DOB16MUX = "DOB16";
	parameter DOB15MUX = "DOB15";
	parameter DOB14MUX = "DOB14";
	parameter DOB13MUX = "DOB13";
	parameter DOB12MUX = "DOB12";
	parameter DOB11MUX = "DOB11";
	parameter DOB10MUX = "DOB10";
	parameter DOB9MUX = "DOB9";
	parameter DOB8MUX = "DOB8";
	parameter DOB7MUX = "DOB7";
	parameter DOB6MUX = "DOB6";
	parameter DOB5MUX = "DOB5";
	parameter DOB4MUX = "DOB4";
	parameter DOB3MUX = "DOB3";
	parameter DOB2MUX = "DOB2";
	parameter DOB1MUX = "DOB1";
	parameter DOB0MUX = "DOB0";
	parameter WID = 0;
	parameter GSR = "ENABLED";
	parameter INITVAL_00 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_01 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_02 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_03 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_04 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_05 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_06 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_07 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_08 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_09 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0A = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0B = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0C = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0D = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0E = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_0F = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_10 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_11 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_12 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_13 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_14 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_15 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_16 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_17 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_18 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_19 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1A = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1B = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1C = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1D = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1E = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_1F = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_20 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_21 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_22 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_23 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_24 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_25 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_26 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_27 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_28 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_29 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2A = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2B = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2C = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2D = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2E = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_2F = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_30 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_31 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_32 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_33 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_34 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_35 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_36 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_37 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_38 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_39 = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3A = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3B = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3C = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3D = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3E = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INITVAL_3F = 320'h00000000000000000000000000000000000000000000000000000000000000000000000000000000;
	parameter INIT_DATA = "STATIC";

	reg [17:0] mem [0:1023];
	reg [17:0] doa = 18'd0, dob = 18'd0;
	wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
	wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
	wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
	wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
	assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = doa;
	assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = dob;

	function [319:0] initval(input integer idx);
		case (idx)
			0: initval = INITVAL_00;
			1: initval = INITVAL_01;
			2: initval = INITVAL_02;
			3: initval = INITVAL_03;
			4: initval = INITVAL_04;
			5: initval = INITVAL_05;
			6: initval = INITVAL_06;
			7: initval = INITVAL_07;
			8: initval = INITVAL_08;
			9: initval = INITVAL_09;
			10: initval = INITVAL_0A;
			11: initval = INITVAL_0B;
			12: initval = INITVAL_0C;
			13: initval = INITVAL_0D;
			14: initval = INITVAL_0E;
			15: initval = INITVAL_0F;
			16: initval = INITVAL_10;
			17: initval = INITVAL_11;
			18: initval = INITVAL_12;
			19: initval = INITVAL_13;
			20: initval = INITVAL_14;
			21: initval = INITVAL_15;
			22: initval = INITVAL_16;
			23: initval = INITVAL_17;
			24: initval = INITVAL_18;
			25: initval = INITVAL_19;
			26: initval = INITVAL_1A;
			27: initval = INITVAL_1B;
			28: initval = INITVAL_1C;
			29: initval = INITVAL_1D;
			30: initval = INITVAL_1E;
			31: initval = INITVAL_1F;
			32: initval = INITVAL_20;
			33: initval = INITVAL_21;
			34: initval = INITVAL_22;
			35: initval = INITVAL_23;
			36: initval = INITVAL_24;
			37: initval = INITVAL_25;
			38: initval = INITVAL_26;
			39: initval = INITVAL_27;
			40: initval = INITVAL_28;
			41: initval = INITVAL_29;
			42: initval = INITVAL_2A;
			43: initval = INITVAL_2B;
			44: initval = INITVAL_2C;
			45: initval = INITVAL_2D;
			46: initval = INITVAL_2E;
			47: initval = INITVAL_2F;
			48: initval = INITVAL_30;
			49: initval = INITVAL_31;
			50: initval = INITVAL_32;
			51: initval = INITVAL_33;
			52: initval = INITVAL_34;
			53: initval = INITVAL_35;
			54: initval = INITVAL_36;
			55: initval = INITVAL_37;
			56: initval = INITVAL_38;
			57: initval = INITVAL_39;
			58: initval = INITVAL_3A;
			59: initval = INITVAL_3B;
			60: initval = INITVAL_3C;
			61: initval = INITVAL_3D;
			62: initval = INITVAL_3E;
			63: initval = INITVAL_3F;
			default: initval = 320'd0;
		endcase
	endfunction

	// The chip-select decode "0bXYZ" as a number.
	function [2:0] cs_decode(input [39:0] s);
		cs_decode = {s[23:16] == "1", s[15:8] == "1", s[7:0] == "1"};
	endfunction

	integer r, i;
	initial begin
		for (r = 0; r < 64; r = r + 1)
			for (i = 0; i < 16; i = i + 1)
				mem[r * 16 + i] = initval(r) >> (i * 20);
		if (!((DATA_WIDTH_A == 9 || DATA_WIDTH_A == 18 || DATA_WIDTH_A == 36) &&
		      (DATA_WIDTH_B == 9 || DATA_WIDTH_B == 18 || DATA_WIDTH_B == 36)))
			$fatal(1, "%m: DP16KD DATA_WIDTH_A %0d / DATA_WIDTH_B %0d: bitforge's model covers 9, 18 and 36 only",
			       DATA_WIDTH_A, DATA_WIDTH_B);
		if (REGMODE_A != "NOREG" || REGMODE_B != "NOREG")
			$fatal(1, "%m: DP16KD with an output register (REGMODE OUTREG): not modelled");
		if (DIA17MUX != "DIA17") $fatal(1, "%m: DP16KD DIA17MUX=%0s (an inverted or constant pin): not modelled", DIA17MUX);
		if (DIA16MUX != "DIA16") $fatal(1, "%m: DP16KD DIA16MUX=%0s (an inverted or constant pin): not modelled", DIA16MUX);
		if (DIA15MUX != "DIA15") $fatal(1, "%m: DP16KD DIA15MUX=%0s (an inverted or constant pin): not modelled", DIA15MUX);
		if (DIA14MUX != "DIA14") $fatal(1, "%m: DP16KD DIA14MUX=%0s (an inverted or constant pin): not modelled", DIA14MUX);
		if (DIA13MUX != "DIA13") $fatal(1, "%m: DP16KD DIA13MUX=%0s (an inverted or constant pin): not modelled", DIA13MUX);
		if (DIA12MUX != "DIA12") $fatal(1, "%m: DP16KD DIA12MUX=%0s (an inverted or constant pin): not modelled", DIA12MUX);
		if (DIA11MUX != "DIA11") $fatal(1, "%m: DP16KD DIA11MUX=%0s (an inverted or constant pin): not modelled", DIA11MUX);
		if (DIA10MUX != "DIA10") $fatal(1, "%m: DP16KD DIA10MUX=%0s (an inverted or constant pin): not modelled", DIA10MUX);
		if (DIA9MUX != "DIA9") $fatal(1, "%m: DP16KD DIA9MUX=%0s (an inverted or constant pin): not modelled", DIA9MUX);
		if (DIA8MUX != "DIA8") $fatal(1, "%m: DP16KD DIA8MUX=%0s (an inverted or constant pin): not modelled", DIA8MUX);
		if (DIA7MUX != "DIA7") $fatal(1, "%m: DP16KD DIA7MUX=%0s (an inverted or constant pin): not modelled", DIA7MUX);
		if (DIA6MUX != "DIA6") $fatal(1, "%m: DP16KD DIA6MUX=%0s (an inverted or constant pin): not modelled", DIA6MUX);
		if (DIA5MUX != "DIA5") $fatal(1, "%m: DP16KD DIA5MUX=%0s (an inverted or constant pin): not modelled", DIA5MUX);
		if (DIA4MUX != "DIA4") $fatal(1, "%m: DP16KD DIA4MUX=%0s (an inverted or constant pin): not modelled", DIA4MUX);
		if (DIA3MUX != "DIA3") $fatal(1, "%m: DP16KD DIA3MUX=%0s (an inverted or constant pin): not modelled", DIA3MUX);
		if (DIA2MUX != "DIA2") $fatal(1, "%m: DP16KD DIA2MUX=%0s (an inverted or constant pin): not modelled", DIA2MUX);
		if (DIA1MUX != "DIA1") $fatal(1, "%m: DP16KD DIA1MUX=%0s (an inverted or constant pin): not modelled", DIA1MUX);
		if (DIA0MUX != "DIA0") $fatal(1, "%m: DP16KD DIA0MUX=%0s (an inverted or constant pin): not modelled", DIA0MUX);
		if (ADA13MUX != "ADA13") $fatal(1, "%m: DP16KD ADA13MUX=%0s (an inverted or constant pin): not modelled", ADA13MUX);
		if (ADA12MUX != "ADA12") $fatal(1, "%m: DP16KD ADA12MUX=%0s (an inverted or constant pin): not modelled", ADA12MUX);
		if (ADA11MUX != "ADA11") $fatal(1, "%m: DP16KD ADA11MUX=%0s (an inverted or constant pin): not modelled", ADA11MUX);
		if (ADA10MUX != "ADA10") $fatal(1, "%m: DP16KD ADA10MUX=%0s (an inverted or constant pin): not modelled", ADA10MUX);
		if (ADA9MUX != "ADA9") $fatal(1, "%m: DP16KD ADA9MUX=%0s (an inverted or constant pin): not modelled", ADA9MUX);
		if (ADA8MUX != "ADA8") $fatal(1, "%m: DP16KD ADA8MUX=%0s (an inverted or constant pin): not modelled", ADA8MUX);
		if (ADA7MUX != "ADA7") $fatal(1, "%m: DP16KD ADA7MUX=%0s (an inverted or constant pin): not modelled", ADA7MUX);
		if (ADA6MUX != "ADA6") $fatal(1, "%m: DP16KD ADA6MUX=%0s (an inverted or constant pin): not modelled", ADA6MUX);
		if (ADA5MUX != "ADA5") $fatal(1, "%m: DP16KD ADA5MUX=%0s (an inverted or constant pin): not modelled", ADA5MUX);
		if (ADA4MUX != "ADA4") $fatal(1, "%m: DP16KD ADA4MUX=%0s (an inverted or constant pin): not modelled", ADA4MUX);
		if (ADA3MUX != "ADA3") $fatal(1, "%m: DP16KD ADA3MUX=%0s (an inverted or constant pin): not modelled", ADA3MUX);
		if (ADA2MUX != "ADA2") $fatal(1, "%m: DP16KD ADA2MUX=%0s (an inverted or constant pin): not modelled", ADA2MUX);
		if (ADA1MUX != "ADA1") $fatal(1, "%m: DP16KD ADA1MUX=%0s (an inverted or constant pin): not modelled", ADA1MUX);
		if (ADA0MUX != "ADA0") $fatal(1, "%m: DP16KD ADA0MUX=%0s (an inverted or constant pin): not modelled", ADA0MUX);
		if (CEAMUX != "CEA") $fatal(1, "%m: DP16KD CEAMUX=%0s (an inverted or constant pin): not modelled", CEAMUX);
		if (OCEAMUX != "OCEA") $fatal(1, "%m: DP16KD OCEAMUX=%0s (an inverted or constant pin): not modelled", OCEAMUX);
		if (CLKAMUX != "CLKA" && CLKAMUX != "INV") $fatal(1, "%m: DP16KD CLKAMUX=%0s: not modelled", CLKAMUX);
		if (WEAMUX != "WEA") $fatal(1, "%m: DP16KD WEAMUX=%0s (an inverted or constant pin): not modelled", WEAMUX);
		if (RSTAMUX != "RSTA") $fatal(1, "%m: DP16KD RSTAMUX=%0s (an inverted or constant pin): not modelled", RSTAMUX);
		if (CSA2MUX != "CSA2") $fatal(1, "%m: DP16KD CSA2MUX=%0s (an inverted or constant pin): not modelled", CSA2MUX);
		if (CSA1MUX != "CSA1") $fatal(1, "%m: DP16KD CSA1MUX=%0s (an inverted or constant pin): not modelled", CSA1MUX);
		if (CSA0MUX != "CSA0") $fatal(1, "%m: DP16KD CSA0MUX=%0s (an inverted or constant pin): not modelled", CSA0MUX);
		if (DOA17MUX != "DOA17") $fatal(1, "%m: DP16KD DOA17MUX=%0s (an inverted or constant pin): not modelled", DOA17MUX);
		if (DOA16MUX != "DOA16") $fatal(1, "%m: DP16KD DOA16MUX=%0s (an inverted or constant pin): not modelled", DOA16MUX);
		if (DOA15MUX != "DOA15") $fatal(1, "%m: DP16KD DOA15MUX=%0s (an inverted or constant pin): not modelled", DOA15MUX);
		if (DOA14MUX != "DOA14") $fatal(1, "%m: DP16KD DOA14MUX=%0s (an inverted or constant pin): not modelled", DOA14MUX);
		if (DOA13MUX != "DOA13") $fatal(1, "%m: DP16KD DOA13MUX=%0s (an inverted or constant pin): not modelled", DOA13MUX);
		if (DOA12MUX != "DOA12") $fatal(1, "%m: DP16KD DOA12MUX=%0s (an inverted or constant pin): not modelled", DOA12MUX);
		if (DOA11MUX != "DOA11") $fatal(1, "%m: DP16KD DOA11MUX=%0s (an inverted or constant pin): not modelled", DOA11MUX);
		if (DOA10MUX != "DOA10") $fatal(1, "%m: DP16KD DOA10MUX=%0s (an inverted or constant pin): not modelled", DOA10MUX);
		if (DOA9MUX != "DOA9") $fatal(1, "%m: DP16KD DOA9MUX=%0s (an inverted or constant pin): not modelled", DOA9MUX);
		if (DOA8MUX != "DOA8") $fatal(1, "%m: DP16KD DOA8MUX=%0s (an inverted or constant pin): not modelled", DOA8MUX);
		if (DOA7MUX != "DOA7") $fatal(1, "%m: DP16KD DOA7MUX=%0s (an inverted or constant pin): not modelled", DOA7MUX);
		if (DOA6MUX != "DOA6") $fatal(1, "%m: DP16KD DOA6MUX=%0s (an inverted or constant pin): not modelled", DOA6MUX);
		if (DOA5MUX != "DOA5") $fatal(1, "%m: DP16KD DOA5MUX=%0s (an inverted or constant pin): not modelled", DOA5MUX);
		if (DOA4MUX != "DOA4") $fatal(1, "%m: DP16KD DOA4MUX=%0s (an inverted or constant pin): not modelled", DOA4MUX);
		if (DOA3MUX != "DOA3") $fatal(1, "%m: DP16KD DOA3MUX=%0s (an inverted or constant pin): not modelled", DOA3MUX);
		if (DOA2MUX != "DOA2") $fatal(1, "%m: DP16KD DOA2MUX=%0s (an inverted or constant pin): not modelled", DOA2MUX);
		if (DOA1MUX != "DOA1") $fatal(1, "%m: DP16KD DOA1MUX=%0s (an inverted or constant pin): not modelled", DOA1MUX);
		if (DOA0MUX != "DOA0") $fatal(1, "%m: DP16KD DOA0MUX=%0s (an inverted or constant pin): not modelled", DOA0MUX);
		if (DIB17MUX != "DIB17") $fatal(1, "%m: DP16KD DIB17MUX=%0s (an inverted or constant pin): not modelled", DIB17MUX);
		if (DIB16MUX != "DIB16") $fatal(1, "%m: DP16KD DIB16MUX=%0s (an inverted or constant pin): not modelled", DIB16MUX);
		if (DIB15MUX != "DIB15") $fatal(1, "%m: DP16KD DIB15MUX=%0s (an inverted or constant pin): not modelled", DIB15MUX);
		if (DIB14MUX != "DIB14") $fatal(1, "%m: DP16KD DIB14MUX=%0s (an inverted or constant pin): not modelled", DIB14MUX);
		if (DIB13MUX != "DIB13") $fatal(1, "%m: DP16KD DIB13MUX=%0s (an inverted or constant pin): not modelled", DIB13MUX);
		if (DIB12MUX != "DIB12") $fatal(1, "%m: DP16KD DIB12MUX=%0s (an inverted or constant pin): not modelled", DIB12MUX);
		if (DIB11MUX != "DIB11") $fatal(1, "%m: DP16KD DIB11MUX=%0s (an inverted or constant pin): not modelled", DIB11MUX);
		if (DIB10MUX != "DIB10") $fatal(1, "%m: DP16KD DIB10MUX=%0s (an inverted or constant pin): not modelled", DIB10MUX);
		if (DIB9MUX != "DIB9") $fatal(1, "%m: DP16KD DIB9MUX=%0s (an inverted or constant pin): not modelled", DIB9MUX);
		if (DIB8MUX != "DIB8") $fatal(1, "%m: DP16KD DIB8MUX=%0s (an inverted or constant pin): not modelled", DIB8MUX);
		if (DIB7MUX != "DIB7") $fatal(1, "%m: DP16KD DIB7MUX=%0s (an inverted or constant pin): not modelled", DIB7MUX);
		if (DIB6MUX != "DIB6") $fatal(1, "%m: DP16KD DIB6MUX=%0s (an inverted or constant pin): not modelled", DIB6MUX);
		if (DIB5MUX != "DIB5") $fatal(1, "%m: DP16KD DIB5MUX=%0s (an inverted or constant pin): not modelled", DIB5MUX);
		if (DIB4MUX != "DIB4") $fatal(1, "%m: DP16KD DIB4MUX=%0s (an inverted or constant pin): not modelled", DIB4MUX);
		if (DIB3MUX != "DIB3") $fatal(1, "%m: DP16KD DIB3MUX=%0s (an inverted or constant pin): not modelled", DIB3MUX);
		if (DIB2MUX != "DIB2") $fatal(1, "%m: DP16KD DIB2MUX=%0s (an inverted or constant pin): not modelled", DIB2MUX);
		if (DIB1MUX != "DIB1") $fatal(1, "%m: DP16KD DIB1MUX=%0s (an inverted or constant pin): not modelled", DIB1MUX);
		if (DIB0MUX != "DIB0") $fatal(1, "%m: DP16KD DIB0MUX=%0s (an inverted or constant pin): not modelled", DIB0MUX);
		if (ADB13MUX != "ADB13") $fatal(1, "%m: DP16KD ADB13MUX=%0s (an inverted or constant pin): not modelled", ADB13MUX);
		if (ADB12MUX != "ADB12") $fatal(1, "%m: DP16KD ADB12MUX=%0s (an inverted or constant pin): not modelled", ADB12MUX);
		if (ADB11MUX != "ADB11") $fatal(1, "%m: DP16KD ADB11MUX=%0s (an inverted or constant pin): not modelled", ADB11MUX);
		if (ADB10MUX != "ADB10") $fatal(1, "%m: DP16KD ADB10MUX=%0s (an inverted or constant pin): not modelled", ADB10MUX);
		if (ADB9MUX != "ADB9") $fatal(1, "%m: DP16KD ADB9MUX=%0s (an inverted or constant pin): not modelled", ADB9MUX);
		if (ADB8MUX != "ADB8") $fatal(1, "%m: DP16KD ADB8MUX=%0s (an inverted or constant pin): not modelled", ADB8MUX);
		if (ADB7MUX != "ADB7") $fatal(1, "%m: DP16KD ADB7MUX=%0s (an inverted or constant pin): not modelled", ADB7MUX);
		if (ADB6MUX != "ADB6") $fatal(1, "%m: DP16KD ADB6MUX=%0s (an inverted or constant pin): not modelled", ADB6MUX);
		if (ADB5MUX != "ADB5") $fatal(1, "%m: DP16KD ADB5MUX=%0s (an inverted or constant pin): not modelled", ADB5MUX);
		if (ADB4MUX != "ADB4") $fatal(1, "%m: DP16KD ADB4MUX=%0s (an inverted or constant pin): not modelled", ADB4MUX);
		if (ADB3MUX != "ADB3") $fatal(1, "%m: DP16KD ADB3MUX=%0s (an inverted or constant pin): not modelled", ADB3MUX);
		if (ADB2MUX != "ADB2") $fatal(1, "%m: DP16KD ADB2MUX=%0s (an inverted or constant pin): not modelled", ADB2MUX);
		if (ADB1MUX != "ADB1") $fatal(1, "%m: DP16KD ADB1MUX=%0s (an inverted or constant pin): not modelled", ADB1MUX);
		if (ADB0MUX != "ADB0") $fatal(1, "%m: DP16KD ADB0MUX=%0s (an inverted or constant pin): not modelled", ADB0MUX);
		if (CEBMUX != "CEB") $fatal(1, "%m: DP16KD CEBMUX=%0s (an inverted or constant pin): not modelled", CEBMUX);
		if (OCEBMUX != "OCEB") $fatal(1, "%m: DP16KD OCEBMUX=%0s (an inverted or constant pin): not modelled", OCEBMUX);
		if (CLKBMUX != "CLKB" && CLKBMUX != "INV") $fatal(1, "%m: DP16KD CLKBMUX=%0s: not modelled", CLKBMUX);
		if (WEBMUX != "WEB") $fatal(1, "%m: DP16KD WEBMUX=%0s (an inverted or constant pin): not modelled", WEBMUX);
		if (RSTBMUX != "RSTB") $fatal(1, "%m: DP16KD RSTBMUX=%0s (an inverted or constant pin): not modelled", RSTBMUX);
		if (CSB2MUX != "CSB2") $fatal(1, "%m: DP16KD CSB2MUX=%0s (an inverted or constant pin): not modelled", CSB2MUX);
		if (CSB1MUX != "CSB1") $fatal(1, "%m: DP16KD CSB1MUX=%0s (an inverted or constant pin): not modelled", CSB1MUX);
		if (CSB0MUX != "CSB0") $fatal(1, "%m: DP16KD CSB0MUX=%0s (an inverted or constant pin): not modelled", CSB0MUX);
		if (DOB17MUX != "DOB17") $fatal(1, "%m: DP16KD DOB17MUX=%0s (an inverted or constant pin): not modelled", DOB17MUX);
		if (DOB16MUX != "DOB16") $fatal(1, "%m: DP16KD DOB16MUX=%0s (an inverted or constant pin): not modelled", DOB16MUX);
		if (DOB15MUX != "DOB15") $fatal(1, "%m: DP16KD DOB15MUX=%0s (an inverted or constant pin): not modelled", DOB15MUX);
		if (DOB14MUX != "DOB14") $fatal(1, "%m: DP16KD DOB14MUX=%0s (an inverted or constant pin): not modelled", DOB14MUX);
		if (DOB13MUX != "DOB13") $fatal(1, "%m: DP16KD DOB13MUX=%0s (an inverted or constant pin): not modelled", DOB13MUX);
		if (DOB12MUX != "DOB12") $fatal(1, "%m: DP16KD DOB12MUX=%0s (an inverted or constant pin): not modelled", DOB12MUX);
		if (DOB11MUX != "DOB11") $fatal(1, "%m: DP16KD DOB11MUX=%0s (an inverted or constant pin): not modelled", DOB11MUX);
		if (DOB10MUX != "DOB10") $fatal(1, "%m: DP16KD DOB10MUX=%0s (an inverted or constant pin): not modelled", DOB10MUX);
		if (DOB9MUX != "DOB9") $fatal(1, "%m: DP16KD DOB9MUX=%0s (an inverted or constant pin): not modelled", DOB9MUX);
		if (DOB8MUX != "DOB8") $fatal(1, "%m: DP16KD DOB8MUX=%0s (an inverted or constant pin): not modelled", DOB8MUX);
		if (DOB7MUX != "DOB7") $fatal(1, "%m: DP16KD DOB7MUX=%0s (an inverted or constant pin): not modelled", DOB7MUX);
		if (DOB6MUX != "DOB6") $fatal(1, "%m: DP16KD DOB6MUX=%0s (an inverted or constant pin): not modelled", DOB6MUX);
		if (DOB5MUX != "DOB5") $fatal(1, "%m: DP16KD DOB5MUX=%0s (an inverted or constant pin): not modelled", DOB5MUX);
		if (DOB4MUX != "DOB4") $fatal(1, "%m: DP16KD DOB4MUX=%0s (an inverted or constant pin): not modelled", DOB4MUX);
		if (DOB3MUX != "DOB3") $fatal(1, "%m: DP16KD DOB3MUX=%0s (an inverted or constant pin): not modelled", DOB3MUX);
		if (DOB2MUX != "DOB2") $fatal(1, "%m: DP16KD DOB2MUX=%0s (an inverted or constant pin): not modelled", DOB2MUX);
		if (DOB1MUX != "DOB1") $fatal(1, "%m: DP16KD DOB1MUX=%0s (an inverted or constant pin): not modelled", DOB1MUX);
		if (DOB0MUX != "DOB0") $fatal(1, "%m: DP16KD DOB0MUX=%0s (an inverted or constant pin): not modelled", DOB0MUX);
	end

	wire clka = CLKAMUX == "INV" ? ~CLKA : CLKA;
	wire clkb = CLKBMUX == "INV" ? ~CLKB : CLKB;
	wire sela = {CSA2, CSA1, CSA0} == cs_decode(CSDECODE_A);
	wire selb = {CSB2, CSB1, CSB0} == cs_decode(CSDECODE_B);
	wire [9:0] rowa = ada[13:4], rowb = adb[13:4];
	wire [8:0] worda = ada[13:5], wordb = adb[13:5];

	// Port A: x36 writes only (the write port of the pseudo dual port mode).
	always @(posedge clka) begin
		if (CEA && sela) begin
			if (DATA_WIDTH_A == 36) begin
				if (WEA) begin
					if (ada[0]) mem[{worda, 1'b0}][8:0] <= dia[8:0];
					if (ada[1]) mem[{worda, 1'b0}][17:9] <= dia[17:9];
					if (ada[2]) mem[{worda, 1'b1}][8:0] <= dib[8:0];
					if (ada[3]) mem[{worda, 1'b1}][17:9] <= dib[17:9];
				end
			end else if (RESETMODE == "SYNC" && RSTA) begin
				doa <= 18'd0;
			end else if (WEA) begin
				if (DATA_WIDTH_A == 18) begin
					if (ada[0]) mem[rowa][8:0] <= dia[8:0];
					if (ada[1]) mem[rowa][17:9] <= dia[17:9];
				end else if (ada[3]) mem[rowa][17:9] <= dia[8:0];
				else mem[rowa][8:0] <= dia[8:0];
				if (WRITEMODE_A == "WRITETHROUGH") doa <= DATA_WIDTH_A == 18 ? dia : {9'd0, dia[8:0]};
				else if (WRITEMODE_A == "READBEFOREWRITE")
					doa <= DATA_WIDTH_A == 18 ? mem[rowa] : {9'd0, ada[3] ? mem[rowa][17:9] : mem[rowa][8:0]};
			end else begin
				doa <= DATA_WIDTH_A == 18 ? mem[rowa] : {9'd0, ada[3] ? mem[rowa][17:9] : mem[rowa][8:0]};
			end
		end
	end

	// Port B: x36 reads only (the read port of the pseudo dual port mode), and drives DOA with the low half.
	always @(posedge clkb) begin
		if (CEB && selb) begin
			if (RESETMODE == "SYNC" && RSTB) begin
				dob <= 18'd0;
				if (DATA_WIDTH_B == 36) doa <= 18'd0;
			end else if (DATA_WIDTH_B == 36) begin
				doa <= mem[{wordb, 1'b0}];
				dob <= mem[{wordb, 1'b1}];
			end else if (WEB) begin
				if (DATA_WIDTH_B == 18) begin
					if (adb[0]) mem[rowb][8:0] <= dib[8:0];
					if (adb[1]) mem[rowb][17:9] <= dib[17:9];
				end else if (adb[3]) mem[rowb][17:9] <= dib[8:0];
				else mem[rowb][8:0] <= dib[8:0];
				if (WRITEMODE_B == "WRITETHROUGH") dob <= DATA_WIDTH_B == 18 ? dib : {9'd0, dib[8:0]};
				else if (WRITEMODE_B == "READBEFOREWRITE")
					dob <= DATA_WIDTH_B == 18 ? mem[rowb] : {9'd0, adb[3] ? mem[rowb][17:9] : mem[rowb][8:0]};
			end else begin
				dob <= DATA_WIDTH_B == 18 ? mem[rowb] : {9'd0, adb[3] ? mem[rowb][17:9] : mem[rowb][8:0]};
			end
		end
	end

	always @(posedge RSTA) if (RESETMODE == "ASYNC" && DATA_WIDTH_A != 36) doa <= 18'd0;
	always @(posedge RSTB) if (RESETMODE == "ASYNC") begin
		dob <= 18'd0;
		if (DATA_WIDTH_B == 36) doa <= 18'd0;
	end
endmodule

module MULT18X18D(A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0, B17, B16, B15
, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0, C17, C16, C15, C14, C13, C12
, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK3, CLK2, CLK1, CLK0, CE3
, CE2, CE1, CE0, RST3, RST2, RST1, RST0, SRIA17, SRIA16, SRIA15, SRIA14, SRIA13, SRIA12, SRIA11, SRIA10, SRIA9, SRIA8, SRIA7, SRIA6, SRIA5, SRIA4
, SRIA3, SRIA2, SRIA1, SRIA0, SRIB17, SRIB16, SRIB15, SRIB14, SRIB13, SRIB12, SRIB11, SRIB10, SRIB9, SRIB8, SRIB7, SRIB6, SRIB5, SRIB4, SRIB3, SRIB2, SRIB1
, SRIB0, SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0, SROB17, SROB16
, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0, ROA17, ROA16, ROA15, ROA14, ROA13
, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0, ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10
, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0, ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7
, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0, P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22
, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1
, P0, SIGNEDP);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_INPUTC_CLK = "NONE";
    parameter REG_INPUTC_CE = "CE0";
    parameter REG_INPUTC_RST = "RST0";
    parameter REG_PIPELINE_CLK = "NONE";
    parameter REG_PIPELINE_CE = "CE0";
    parameter REG_PIPELINE_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter CLK0_DIV = "ENABLED";
    parameter CLK1_DIV = "ENABLED";
    parameter CLK2_DIV = "ENABLED";
    parameter CLK3_DIV = "ENABLED";
    parameter HIGHSPEED_CLK = "NONE";
    parameter GSR = "ENABLED";
    parameter CAS_MATCH_REG = "FALSE";
    parameter SOURCEB_MODE = "B_SHIFT";
    parameter MULT_BYPASS = "DISABLED";
    parameter RESETMODE = "SYNC";
    input A17;
    input A16;
    input A15;
    input A14;
    input A13;
    input A12;
    input A11;
    input A10;
    input A9;
    input A8;
    input A7;
    input A6;
    input A5;
    input A4;
    input A3;
    input A2;
    input A1;
    input A0;
    input B17;
    input B16;
    input B15;
    input B14;
    input B13;
    input B12;
    input B11;
    input B10;
    input B9;
    input B8;
    input B7;
    input B6;
    input B5;
    input B4;
    input B3;
    input B2;
    input B1;
    input B0;
    input C17;
    input C16;
    input C15;
    input C14;
    input C13;
    input C12;
    input C11;
    input C10;
    input C9;
    input C8;
    input C7;
    input C6;
    input C5;
    input C4;
    input C3;
    input C2;
    input C1;
    input C0;
    input SIGNEDA;
    input SIGNEDB;
    input SOURCEA;
    input SOURCEB;
    input CLK3;
    input CLK2;
    input CLK1;
    input CLK0;
    input CE3;
    input CE2;
    input CE1;
    input CE0;
    input RST3;
    input RST2;
    input RST1;
    input RST0;
    input SRIA17;
    input SRIA16;
    input SRIA15;
    input SRIA14;
    input SRIA13;
    input SRIA12;
    input SRIA11;
    input SRIA10;
    input SRIA9;
    input SRIA8;
    input SRIA7;
    input SRIA6;
    input SRIA5;
    input SRIA4;
    input SRIA3;
    input SRIA2;
    input SRIA1;
    input SRIA0;
    input SRIB17;
    input SRIB16;
    input SRIB15;
    input SRIB14;
    input SRIB13;
    input SRIB12;
    input SRIB11;
    input SRIB10;
    input SRIB9;
    input SRIB8;
    input SRIB7;
    input SRIB6;
    input SRIB5;
    input SRIB4;
    input SRIB3;
    input SRIB2;
    input SRIB1;
    input SRIB0;
    output SROA17;
    output SROA16;
    output SROA15;
    output SROA14;
    output SROA13;
    output SROA12;
    output SROA11;
    output SROA10;
    output SROA9;
    output SROA8;
    output SROA7;
    output SROA6;
    output SROA5;
    output SROA4;
    output SROA3;
    output SROA2;
    output SROA1;
    output SROA0;
    output SROB17;
    output SROB16;
    output SROB15;
    output SROB14;
    output SROB13;
    output SROB12;
    output SROB11;
    output SROB10;
    output SROB9;
    output SROB8;
    output SROB7;
    output SROB6;
    output SROB5;
    output SROB4;
    output SROB3;
    output SROB2;
    output SROB1;
    output SROB0;
    output ROA17;
    output ROA16;
    output ROA15;
    output ROA14;
    output ROA13;
    output ROA12;
    output ROA11;
    output ROA10;
    output ROA9;
    output ROA8;
    output ROA7;
    output ROA6;
    output ROA5;
    output ROA4;
    output ROA3;
    output ROA2;
    output ROA1;
    output ROA0;
    output ROB17;
    output ROB16;
    output ROB15;
    output ROB14;
    output ROB13;
    output ROB12;
    output ROB11;
    output ROB10;
    output ROB9;
    output ROB8;
    output ROB7;
    output ROB6;
    output ROB5;
    output ROB4;
    output ROB3;
    output ROB2;
    output ROB1;
    output ROB0;
    output ROC17;
    output ROC16;
    output ROC15;
    output ROC14;
    output ROC13;
    output ROC12;
    output ROC11;
    output ROC10;
    output ROC9;
    output ROC8;
    output ROC7;
    output ROC6;
    output ROC5;
    output ROC4;
    output ROC3;
    output ROC2;
    output ROC1;
    output ROC0;
    output P35;
    output P34;
    output P33;
    output P32;
    output P31;
    output P30;
    output P29;
    output P28;
    output P27;
    output P26;
    output P25;
    output P24;
    output P23;
    output P22;
    output P21;
    output P20;
    output P19;
    output P18;
    output P17;
    output P16;
    output P15;
    output P14;
    output P13;
    output P12;
    output P11;
    output P10;
    output P9;
    output P8;
    output P7;
    output P6;
    output P5;
    output P4;
    output P3;
    output P2;
    output P1;
    output P0;
    output SIGNEDP;

    wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
    wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
    wire [17:0] c = {C17, C16, C15, C14, C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0};
    wire signed [18:0] as = {SIGNEDA & a[17], a};
    wire signed [18:0] bs = {SIGNEDB & b[17], b};
    wire signed [37:0] p = as * bs;
    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p[35:0];
    assign SIGNEDP = SIGNEDA | SIGNEDB;
    assign {ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0} = a;
    assign {ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0} = b;
    assign {ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0} = c;
    assign {SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0} = a;
    assign {SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0} = b;

    initial begin
        if (REG_INPUTA_CLK != "NONE" || REG_INPUTB_CLK != "NONE" || REG_INPUTC_CLK != "NONE" || REG_PIPELINE_CLK != "NONE" || REG_OUTPUT_CLK != "NONE")
            $fatal(1, "%m: MULT18X18D with input, pipeline or output registers: not modelled");
        if (MULT_BYPASS != "DISABLED") $fatal(1, "%m: MULT18X18D MULT_BYPASS=%0s: not modelled", MULT_BYPASS);
    end
    always @* if (SOURCEA === 1'b1 || SOURCEB === 1'b1)
        $fatal(1, "%m: MULT18X18D SOURCEA/SOURCEB (the shift-register inputs): not modelled");
endmodule
