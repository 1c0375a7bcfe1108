import { describe, expect, it } from "vitest";
import { plain } from "../src/lib/problems";

describe("a violation in plain words", () => {
  it("moves the rule and its regular expression to the details", () => {
    const p = plain({
      field: "name",
      rule: "pattern",
      message: "name must be a letter followed by up to 62 letters, digits, _ or - (^[a-zA-Z][a-zA-Z0-9_-]{0,62}$) (rule: pattern).",
    });
    expect(p.text).toBe("Must be a letter followed by up to 62 letters, digits, _ or -.");
    expect(p.detail).toBe("rule: pattern; pattern: ^[a-zA-Z][a-zA-Z0-9_-]{0,62}$");
  });

  it("names the line of a list field", () => {
    const p = plain({ field: "tags[1]", rule: "tag", message: "tags[1] must be 1-32 characters from a-z 0-9 _ -, starting with a letter or digit (rule: tag)." });
    expect(p.text).toBe("Line 2: must be 1-32 characters from a-z 0-9 _ -, starting with a letter or digit.");
    expect(p.detail).toBe("rule: tag");
  });
});
