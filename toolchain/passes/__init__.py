"""Graph passes: functions Graph -> Graph that each establish one guarantee."""
