"""A hierarchical block's library evaluates only on an input change
(:mod:`sim.hier_verilator`)."""

import re
import stat
import sys

import pytest

from sim.hier_verilator import edit_wrapper, main

#: The shape Verilator 5.048 writes for ``--lib-create`` (two inputs, one
#: output; trimmed).
WRAPPER = """\
class Vblk_container: public Vblk {
  public:
    long long m_seqnum;
    Vblk_container(const char* scopep__V):
    Vblk(scopep__V) {}
};

extern "C" {
    long long blk_protectlib_combo_update(
        void* vhandlep__V,
        svLogic i_a,
        const svLogicVecVal* i_b,
        svLogic* o_y
    ) {
        Vblk_container* const handlep__V = static_cast<Vblk_container*>(vhandlep__V);
        handlep__V->i_a = (i_a);
        VL_SET_W_SVLV(163,  handlep__V->i_b, i_b + 0);
        handlep__V->eval();
        *o_y = handlep__V->o_y;
        return handlep__V->m_seqnum++;
    }

    long long blk_protectlib_seq_update(
        void* vhandlep__V,
        svLogic clk,
        svLogic* o_y
    ) {
        Vblk_container* const handlep__V = static_cast<Vblk_container*>(vhandlep__V);
        handlep__V->clk = (clk);
        handlep__V->eval();
        *o_y = handlep__V->o_y;
        return handlep__V->m_seqnum++;
    }
}
"""


def updates(text):
    """``(combo_update, seq_update)`` of a wrapper's text."""
    seq = text.index("blk_protectlib_seq_update")
    return text[text.index("blk_protectlib_combo_update"):seq], text[seq:]


def test_combo_update_evaluates_on_a_change_only():
    combo, _ = updates(edit_wrapper(WRAPPER))
    assert "const auto prev_i_a__V = handlep__V->i_a;" in combo
    assert "const auto prev_i_b__V = handlep__V->i_b;" in combo
    # the values before are taken before the assignments, compared after them
    assert combo.index("prev_i_b__V = ") < combo.index("handlep__V->i_a = (i_a);")
    assert ("if (!handlep__V->m_evaluated__V "
            "|| handlep__V->i_a != prev_i_a__V || handlep__V->i_b != prev_i_b__V) {\n"
            "            handlep__V->eval();\n") in combo
    assert combo.count("eval()") == 1


def test_a_single_clock_s_fall_is_seen_by_the_next_evaluation():
    edited = edit_wrapper(WRAPPER)
    assert "bool m_fall_pending__V = false;" in edited[:edited.index("extern")]
    _, seq = updates(edited)
    rise, fall = seq.split("} else if")
    # a rise (not a repeated high): a pending fall first, then the edge,
    # then the fall left pending
    assert re.search(r"if \(clk\) \{\s+if \(!handlep__V->m_clock_high__V\) \{[^\n]*\n"
                     r"\s+if \(handlep__V->m_fall_pending__V\) handlep__V->eval\(\);"
                     r"\s+handlep__V->clk = 1;\s+handlep__V->eval\(\);\s+handlep__V->clk = 0;"
                     r"[^\n]*\n\s+handlep__V->m_fall_pending__V = true;", rise), rise
    # the fall evaluates only before any evaluation or with the clock still high
    assert fall.startswith(" (!handlep__V->m_evaluated__V || handlep__V->clk) {")
    assert fall.count("eval()") == 1
    assert "handlep__V->m_clock_high__V = clk;" in fall


def test_without_folding_the_clock_s_edges_are_left_alone():
    _, seq = updates(edit_wrapper(WRAPPER, fold_falls=False))
    assert ("handlep__V->clk = (clk);\n        handlep__V->eval();\n"
            "        handlep__V->m_evaluated__V = true;") in seq


def test_two_clocks_are_not_folded():
    two = WRAPPER.replace("        handlep__V->clk = (clk);\n",
                          "        handlep__V->clk = (clk);\n        handlep__V->rst = (rst);\n")
    _, seq = updates(edit_wrapper(two))
    assert "m_fall_pending__V" not in seq and seq.count("eval()") == 1


def test_a_block_without_inputs_is_evaluated_once_between_edges():
    none = WRAPPER.replace("        handlep__V->i_a = (i_a);\n", "").replace(
        "        VL_SET_W_SVLV(163,  handlep__V->i_b, i_b + 0);\n", "")
    combo, _ = updates(edit_wrapper(none))
    assert "if (!handlep__V->m_evaluated__V) {" in combo


def test_an_edited_wrapper_is_left_as_it_is():
    """Verilator skips an unchanged block's verilation, leaving the edited file."""
    once = edit_wrapper(WRAPPER)
    assert edit_wrapper(once) == once


@pytest.mark.parametrize("text, message", [
    ("int main() {}\n", "no container class"),
    (WRAPPER.replace("long long blk_protectlib_combo_update", "long long blk_other"),
     "no \\*_protectlib_combo_update"),
    (WRAPPER.replace("long long blk_protectlib_seq_update", "long long blk_other"),
     "no \\*_protectlib_seq_update"),
    (WRAPPER.replace("        handlep__V->i_a = (i_a);\n",
                     "        handlep__V->i_a = (i_a);\n        handlep__V->rootp->x = 1;\n"),
     "does more than set inputs before its evaluation: handlep__V->rootp->x = 1;"),
    # a combo_update without its evaluation: the match would run into seq_update
    (WRAPPER.replace("        handlep__V->eval();\n        *o_y", "        *o_y", 1),
     "does more than set inputs"),
    (WRAPPER.replace("        handlep__V->clk = (clk);\n",
                     "        handlep__V->clk = (clk);\n        handlep__V->rootp->x = 1;\n"),
     "seq_update does more than set its clocks"),
])
def test_a_wrapper_of_another_shape_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        edit_wrapper(text)


def fake_verilator(tmp_path, text, status=0):
    """A stand-in for Verilator that writes ``text`` as the library wrapper
    named by its arguments file and exits ``status``."""
    script = tmp_path / "verilator"
    script.write_text(f"""#!{sys.executable}
import sys
from pathlib import Path
args = Path(sys.argv[2]).read_text().split()
if "--lib-create" in args:
    mdir, name = args[args.index("-Mdir") + 1], args[args.index("--lib-create") + 1]
    Path(mdir, name + ".cpp").write_text({text!r})
sys.exit({status})
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def args_file(tmp_path, lib=True, verilog="module blk(input clk);\nendmodule\n"):
    (tmp_path / "obj").mkdir(exist_ok=True)
    (tmp_path / "top.v").write_text(verilog)
    path = tmp_path / "blk__hierMkArgs.f"
    path.write_text(f"--cc -Mdir {tmp_path / 'obj'} {tmp_path / 'top.v'} --prefix Vblk "
                    + ("--lib-create blk --hierarchical-child 1 " if lib else "")
                    + '"-o" "bench"\n')
    return path


def test_the_block_s_wrapper_is_edited_after_verilator_runs(tmp_path):
    verilator = fake_verilator(tmp_path, WRAPPER)
    assert main([str(verilator), "-f", str(args_file(tmp_path))]) == 0
    assert (tmp_path / "obj" / "blk.cpp").read_text() == edit_wrapper(WRAPPER)


def test_a_design_with_a_falling_edge_keeps_its_clock_s_evaluations(tmp_path):
    verilator = fake_verilator(tmp_path, WRAPPER)
    negedge = "module blk(input clk);\n  always @(negedge clk) ;\nendmodule\n"
    assert main([str(verilator), "-f", str(args_file(tmp_path, verilog=negedge))]) == 0
    assert ((tmp_path / "obj" / "blk.cpp").read_text()
            == edit_wrapper(WRAPPER, fold_falls=False))


def test_verilog_it_cannot_read_keeps_the_clock_s_evaluations(tmp_path):
    verilator = fake_verilator(tmp_path, WRAPPER)
    args = args_file(tmp_path)
    args.write_text(args.read_text().replace("top.v", "missing.v"))
    assert main([str(verilator), "-f", str(args)]) == 0
    assert ((tmp_path / "obj" / "blk.cpp").read_text()
            == edit_wrapper(WRAPPER, fold_falls=False))


def test_the_top_s_own_verilation_is_left_alone(tmp_path):
    verilator = fake_verilator(tmp_path, WRAPPER)
    assert main([str(verilator), "-f", str(args_file(tmp_path, lib=False))]) == 0
    assert not any((tmp_path / "obj").iterdir())


def test_verilator_s_failure_is_passed_on(tmp_path):
    verilator = fake_verilator(tmp_path, WRAPPER, status=3)
    assert main([str(verilator), "-f", str(args_file(tmp_path))]) == 3
    assert (tmp_path / "obj" / "blk.cpp").read_text() == WRAPPER


def test_an_unexpected_wrapper_fails_the_build_with_one_line(tmp_path, capsys):
    verilator = fake_verilator(tmp_path, "int main() {}\n")
    assert main([str(verilator), "-f", str(args_file(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "blk.cpp" in err and "no container class" in err, err
