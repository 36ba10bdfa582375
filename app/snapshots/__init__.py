"""Snapshots of a robot's working memory: taken from its mirror under the robot's lock,
restored through the write protocol (app/working_memory/sync.py `RobotSync.restore`)."""
