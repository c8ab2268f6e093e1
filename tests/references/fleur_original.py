"""FLEUR and RefFLEUR through the authors' procedure and the original LLaVA code: the reference of
tests/fleur/test_parity.py. Run it in an environment with LLaVA's code and its transformers (4.31), not in the suite:

    PYTHONPATH=LLaVA python tests/references/fleur_original.py --llava DIR --items items.json --output fixture.json

(`LLaVA` a checkout of haotian-liu/LLaVA at ab58dc1; the refenv also needs einops, which its `llava.model` imports.)

The body of `judge` is fleur.py:67-171 / reffleur.py of Yebin46/FLEUR (LLaVA at ab58dc1, the submodule's commit) with
these changes, each needed to run it here and none touching the numbers:
- CPU and fp32: the lines of `load_pretrained_model` (llava/model/builder.py) that apply to LLaVA-1.5, with
  `torch_dtype=torch.float32` instead of fp16 (the authors run fp16 on CUDA; `.cuda()` and the fp16 casts are
  dropped: loading in fp16 and casting back moves the logits by about 2e-3 on the tiny judge);
- no `TextStreamer` (it only prints), and `max_new_tokens` is an argument (the authors' 512);
- the `except: print("Error!")` that reuses the previous score, and the `continue` that skips an out-of-range row,
  record the outcome instead (`unparsable` / `out_of_range` / `digit_not_found`, by the exception's place), and every
  row is scored (the authors score every third);
- the first step's logits of each prompt are recorded (docs/spec/fleur.md#logit-differences);
- FLEUR's items get fleur_exp.py's second turn ("Why? Tell me the reason.") after their score, in the same call.
"""

import argparse
import json
import re

import torch
from PIL import Image


def judge(model, tokenizer, image_processor, rate2token, args, image_file, inp, llava, explain=False):
    conv_templates, SeparatorStyle = llava["conv_templates"], llava["SeparatorStyle"]
    process_images, tokenizer_image_token = llava["process_images"], llava["tokenizer_image_token"]
    KeywordsStoppingCriteria = llava["KeywordsStoppingCriteria"]
    conv = conv_templates["llava_v1"].copy()
    image = Image.open(image_file).convert("RGB")
    image_tensor = process_images([image], image_processor, args)
    inp = llava["DEFAULT_IMAGE_TOKEN"] + "\n" + inp
    conv.append_message(conv.roles[0], inp)
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()
    input_ids = tokenizer_image_token(prompt, tokenizer, llava["IMAGE_TOKEN_INDEX"], return_tensors="pt").unsqueeze(0)
    stop_str = conv.sep if conv.sep_style != SeparatorStyle.TWO else conv.sep2
    stopping_criteria = KeywordsStoppingCriteria([stop_str], tokenizer, input_ids)
    with torch.inference_mode():
        output_dict = model.generate(
            input_ids, images=image_tensor, do_sample=False, temperature=0.2, num_beams=1,
            max_new_tokens=args.max_new_tokens, use_cache=True, stopping_criteria=[stopping_criteria],
            output_scores=True, return_dict_in_generate=True,
        )  # fmt: skip
    output_ids = output_dict.sequences
    outputs = tokenizer.decode(output_ids[0, input_ids.shape[1] :]).strip()
    record = {"answer": outputs, "prompt_ids": [int(i) for i in input_ids[0]],
              "generated": output_ids[0, input_ids.shape[1]:].tolist(),
              "first_logits": output_dict.scores[0][0].float().tolist(), "score": None, "outcome": "ok"}  # fmt: skip
    stage = "parse"
    try:
        dotsnumbersdots = re.sub(r"[^\d\.]", "", outputs[:-4])
        numbersdots = re.sub(r"^\.+", "", dotsnumbersdots)
        numbers = re.sub(r"\.+$", "", numbersdots)
        score_check = float(numbers)
        if 0 > score_check or 1 < score_check:
            record["outcome"] = "out_of_range"  # the authors: `continue`
            return record
        stage = "digits"
        if score_check < 1.0:
            stage = "index" if "." in str(score_check) else "parse"
            num_index_in_score = str(score_check).index(".") + 1
            stage = "digits"
            find_num = int(str(score_check)[num_index_in_score])
            num_index_in_token = (output_ids[0, input_ids.shape[1] :] == rate2token[find_num]).nonzero().squeeze()
            if len(num_index_in_token.shape) > 0:
                if find_num == 0:
                    num_index_in_token = num_index_in_token[1]
                else:
                    num_index_in_token = num_index_in_token[0]
            probs = output_dict.scores[num_index_in_token]
            probs = torch.nn.functional.softmax(probs, dim=-1)[0]
            score = 0.0
            for rate, token in rate2token.items():
                score += probs[token] * rate * 0.1
            if len(str(score_check)) > 3:
                num2_index_in_score = str(score_check).index(".") + 2
                find_num2 = int(str(score_check)[num2_index_in_score])
                num2_index_in_token = (output_ids[0, input_ids.shape[1] :] == rate2token[find_num2]).nonzero().squeeze()
                if len(num2_index_in_token.shape) > 0:
                    num2_index_in_token = num2_index_in_token[1]
                probs2 = output_dict.scores[num2_index_in_token]
                probs2 = torch.nn.functional.softmax(probs2, dim=-1)[0]
                for rate, token in rate2token.items():
                    score += probs2[token] * rate * 0.01
        else:
            num_index_in_token = (output_ids[0, input_ids.shape[1] :] == rate2token[1]).nonzero().squeeze()
            probs = output_dict.scores[num_index_in_token]
            probs = torch.nn.functional.softmax(probs, dim=-1)[0]
            score = 0.9 * probs[rate2token[0]] + probs[rate2token[1]]
        record["score"] = float(score)
        if explain:  # fleur_exp.py:181 and the loop's second turn
            conv.messages[-1][-1] = str(score.item()) + "</s>"
            conv.append_message(conv.roles[0], "Why? Tell me the reason.")
            conv.append_message(conv.roles[1], None)
            prompt = conv.get_prompt()
            input_ids = tokenizer_image_token(prompt, tokenizer, llava["IMAGE_TOKEN_INDEX"], return_tensors="pt")
            input_ids = input_ids.unsqueeze(0)
            stopping_criteria = KeywordsStoppingCriteria([stop_str], tokenizer, input_ids)
            with torch.inference_mode():
                output_dict = model.generate(
                    input_ids, images=image_tensor, do_sample=False, temperature=0.2, num_beams=1,
                    max_new_tokens=args.explanation_max_new_tokens, use_cache=True,
                    stopping_criteria=[stopping_criteria], output_scores=True, return_dict_in_generate=True,
                )  # fmt: skip
            record["explanation_prompt_ids"] = [int(i) for i in input_ids[0]]
            record["explanation"] = tokenizer.decode(output_dict.sequences[0, input_ids.shape[1] :]).strip()
    except Exception:  # the authors: print("Error!") and reuse the previous score
        record["outcome"] = "unparsable" if stage == "parse" else "digit_not_found"
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llava", required=True, help="LLaVA-1.5 directory, original layout")
    parser.add_argument("--items", required=True, help="JSON: {images, candidates, references}")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--explanation-max-new-tokens", type=int, default=512)
    parser.add_argument("--image-aspect-ratio", default="pad")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
    from llava.conversation import SeparatorStyle, conv_templates
    from llava.mm_utils import KeywordsStoppingCriteria, process_images, tokenizer_image_token
    from llava.model import LlavaLlamaForCausalLM
    from transformers import AutoTokenizer

    llava = dict(DEFAULT_IMAGE_TOKEN=DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX=IMAGE_TOKEN_INDEX,
                 SeparatorStyle=SeparatorStyle, conv_templates=conv_templates,
                 KeywordsStoppingCriteria=KeywordsStoppingCriteria, process_images=process_images,
                 tokenizer_image_token=tokenizer_image_token)  # fmt: skip
    # llava/model/builder.py:121-143 (load_pretrained_model) in fp32 on CPU: the builder casts to fp16
    tokenizer = AutoTokenizer.from_pretrained(args.llava, use_fast=False)
    model = LlavaLlamaForCausalLM.from_pretrained(args.llava, low_cpu_mem_usage=True, torch_dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer))
    vision_tower = model.get_vision_tower()
    if not vision_tower.is_loaded:
        vision_tower.load_model()
    image_processor = vision_tower.image_processor
    model = model.float().eval()
    rate2token = {s: tokenizer.encode(str(s))[-1] for s in range(10)}
    items = json.load(open(args.items))
    results = {"fleur": [], "ref_fleur": []}
    for image_file, candidate, reference in zip(items["images"], items["candidates"], items["references"]):
        candidate = " ".join(candidate.split())
        reference = "\n".join(reference)
        inp = f"Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. (Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at all.\n1.0: The caption accurately and clearly describes the image.\n\nCaption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"  # noqa: E501
        results["fleur"].append(
            judge(model, tokenizer, image_processor, rate2token, args, image_file, inp, llava, explain=True)
        )
        inp = f"Your task is to evaluate and rate the candidate caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. (Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at all.\n1.0: The caption accurately and clearly describes the image.\n\nReference Captions: {reference}\n\nCandidate Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"  # noqa: E501
        results["ref_fleur"].append(judge(model, tokenizer, image_processor, rate2token, args, image_file, inp, llava))
    json.dump(results, open(args.output, "w"))


if __name__ == "__main__":
    main()
