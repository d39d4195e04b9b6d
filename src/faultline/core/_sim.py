"""What numbers made with the offline `sim` model say: one wording for every run summary, table and report that
shows them, whichever layer shows it."""

SIM_NOTE = (
    "sim is an offline simulator that follows each task's ground truth: its numbers measure the runtime's"
    " mechanisms, not a model"
)
SIM_SYSTEM_NOTE = (
    "sim answers the agents of a system of one's own with their own last message: its numbers measure the"
    " runtime's mechanisms, not a model"
)
