"""Each rejection rule on real bad questions (from issue 45's trial and from the embedded model on a Sphinx build of
standard-library docstrings and on SciFact), and real good questions that every rule must let through."""

from __future__ import annotations

import pytest

from testset_builder import question_rules as rules
from testset_builder.questions import validation_problem

GETPASS = (
    "getpass.getuser() Get the username from the environment or password database. First try various environment "
    "variables, then the password database. This works on Windows as long as USERNAME is set."
)
PPRINT = (
    "pprint.pp(object, *args, sort_dicts=False, **kwargs) Pretty-print a Python object. pprint.pformat(object, "
    "indent=1, width=80) Format a Python object into a pretty-printed representation."
)
CLOCK = (
    "BMAL1 and CLOCK, Two Essential Components of the Circadian Clock, Are Involved in Glucose Homeostasis. We "
    "demonstrate a role for Bmal1 and Clock in the regulation of glucose homeostasis. Gluconeogenesis is abolished "
    "by deletion of Bmal1 and is depressed in Clock mutants."
)
MUTATIONS = (
    "Mutations among Italian mucopolysaccharidosis type I patients. Mutations were found in 18 patients. The two most "
    "common mutations in northern Europeans (W402X and Q70X) accounted for 11% and 13% of the alleles. The high "
    "frequency of the P533R mutation seems to be confined to Sicily."
)
GLOB = (
    "glob.glob(pathname, *, root_dir=None, recursive=False) Return a list of paths matching a pathname pattern. The "
    "pattern may contain simple shell-style wildcards a la fnmatch."
)

GOOD = [
    ("does taking vitamin D reduce fractures in older people?", "Vitamin D reduced fractures by 22% in adults."),
    ("is getpass.getuser available on Windows?", GETPASS),
    ("what does pprint.pformat return?", PPRINT),
    ("what is the role of Bmal1 and Clock in the regulation of glucose homeostasis?", CLOCK),
    ("how often is the P533R mutation found in Sicily?", MUTATIONS),
    ("what is the difference between W402X and Q70X?", MUTATIONS),
    ("How do you use glob to find files in a directory?", GLOB),
    ("do the results of the metabolic phenotyping show a link with cancer?", "Metabolic phenotyping of plasma..."),
    ("which treaty ended the thirty years war?", "The Treaty of Westphalia in 1648 ended the Thirty Years' War."),
]


@pytest.mark.parametrize(("question", "passage"), GOOD)
def test_good_questions_pass_every_rule(question, passage):
    assert rules.problem(question, passage) is None
    assert validation_problem(question, passage, "natural") is None


@pytest.mark.parametrize(
    "question",
    [
        "what does translate translate mean?",
        "what does heapq.nlargest(n) return heapq.nlargest(n)",
        "can ivermectin be used to treat cancer and should ivermectin be used to treat cancer?",
        "what is textwrap_wrap_wrap for?",
    ],
)
def test_text_that_repeats_itself_is_rejected(question):
    assert rules.repeats_itself(question) == "repeats itself"


def test_a_list_of_identifiers_is_not_a_question():
    assert rules.lists_identifiers("textwrap, textwrap_wrap, textwrap_wrap_wrap, textwrap_fill") == "lists identifiers"
    assert rules.lists_identifiers("does glob match hidden files, dot files, or both?") is None


@pytest.mark.parametrize(
    "question",
    [
        "timeit - python -h -n -n -s -n -1 -n -8 -n -2",
        "What is the purpose of pprint.pp(object, *args, sort_dicts=False, **kwargs)¶?",
        "how do I format a Python object in pprint.pp(object, *args, sort_dicts=False",
    ],
)
def test_command_line_soup_and_copied_signatures_are_rejected(question):
    assert rules.code_or_markup(question) == "code or markup"


def test_a_cut_question_is_truncated():
    assert rules.truncated("how do the collect and the", ran_out=False) == "truncated"
    assert rules.truncated("what does the sep argument of string.capwords do when it is absent or", False)
    assert rules.truncated("why does it stop here?", ran_out=True) == "truncated"
    assert rules.truncated("why does it stop here?") is None
    assert rules.truncated("vitamin d fractures elderly trial") is None  # a keyword query needs no question mark


@pytest.mark.parametrize(
    "question",
    [
        "What is the difference between the two?",
        "what happens in this case?",
        "what is the meaning of the “seKr3t” in this example?",
        "what is the purpose of this function?",
        "how is this useful?",
        "Which of the following statements is true regarding Cdv genes?",
        "What is the significance of this study?",
        "what do the results suggest?",
        "what is the default value of the parameter?",
        "how is the above computed?",
    ],
)
def test_a_question_pointing_at_what_only_the_chunk_shows_has_no_referent(question):
    assert rules.no_referent(question) == "no referent"


@pytest.mark.parametrize(
    "question",
    [
        "what is the difference between pprint.pp and pprint.pp?",
        "what is the difference between getpass() and getpass()?",
        "how do Getpass and getpass differ?",
        "pprint.pp vs pprint.pp",
    ],
)
def test_a_thing_compared_with_itself_is_rejected(question):
    assert rules.compares_with_itself(question) == "compares a thing with itself"


def test_a_question_naming_what_its_source_lacks_is_rejected():
    assert rules.names_what_source_lacks("how do getpass() and os.getlogin() differ?", GETPASS)
    assert rules.names_what_source_lacks("what is the difference between string.capwords and string.sift?", "")
    assert rules.names_what_source_lacks(
        "do physicians follow the Canadian Cancer Society's treatment guidelines?",
        "physicians at three Canadian cancer centres follow local treatment guidelines",
    )
    assert rules.names_what_source_lacks("is getpass.getuser available on Windows?", GETPASS) is None


def test_the_summary_reason_is_the_first_rule_that_rejects():
    reason = validation_problem("what is the difference between pprint.pp and pprint.pp?", PPRINT, "natural")
    assert reason == "compares a thing with itself"
    assert validation_problem("what is the purpose of this?", PPRINT, "natural", ran_out=True) == "truncated"
