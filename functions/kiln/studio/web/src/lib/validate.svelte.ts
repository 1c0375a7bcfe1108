// Live validation: the draft goes to the server's dry run (the same rules as save) a moment
// after the author stops typing; only the newest answer is kept.
import type { Api, Draft, Finding, SyntaxProblem, Violation } from "./api";

export class LiveCheck {
  violations = $state<Violation[]>([]);
  syntax = $state<SyntaxProblem | null>(null);
  breaking = $state<Finding[]>([]); // what saving the draft would break for the tool's clients
  checking = $state(false);
  error = $state("");
  private timer: ReturnType<typeof setTimeout> | undefined;
  private seq = 0;

  constructor(private readonly api: Api) {}

  schedule(draft: Draft, delay = 350): void {
    clearTimeout(this.timer);
    const snapshot = $state.snapshot(draft) as Draft;
    this.timer = setTimeout(() => void this.run(snapshot), delay);
  }

  async run(draft: Draft): Promise<void> {
    const mine = ++this.seq;
    this.checking = true;
    try {
      const reply = await this.api.validate(draft);
      if (mine !== this.seq) return;
      this.violations = reply.violations;
      this.syntax = reply.syntax;
      this.breaking = reply.breaking ?? [];
      this.error = "";
    } catch (e) {
      if (mine === this.seq) this.error = (e as Error).message;
    } finally {
      if (mine === this.seq) this.checking = false;
    }
  }

  for(prefix: string): Violation[] {
    return this.violations.filter((v) => v.field === prefix || v.field.startsWith(`${prefix}.`) || v.field.startsWith(`${prefix}[`));
  }

  stop(): void {
    clearTimeout(this.timer);
    this.seq++;
  }
}
